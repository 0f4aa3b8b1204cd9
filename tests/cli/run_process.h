// Runs the built `kiln` program (KILN_CLI) as a child process and captures what a user would see:
// stdout, stderr and how it ended. Header-only so that tests/e2e can use it too.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/openblas_core.h"

namespace kiln::test {

struct ProcessResult {
    bool exited = false;     // ended through exit(); false: killed by a signal (a crash) or timed out
    int exit_code = -1;      // when exited
    int signal = 0;          // when killed by a signal
    bool timed_out = false;
    std::string out, err;

    // The stderr lines without their newlines ("a\nb\n" -> {"a", "b"}; a last line without '\n' counts).
    std::vector<std::string> err_lines() const {
        std::vector<std::string> lines;
        size_t start = 0;
        while (start < err.size()) {
            size_t nl = err.find('\n', start);
            if (nl == std::string::npos) nl = err.size();
            lines.push_back(err.substr(start, nl - start));
            start = nl + 1;
        }
        return lines;
    }

    // For assertion messages: everything needed to see what went wrong.
    std::string describe() const {
        std::string s = exited ? "exit code " + std::to_string(exit_code)
                               : (timed_out ? std::string("timed out") : "killed by signal " + std::to_string(signal) +
                                                                             " (" + strsignal(signal) + ")");
        return s + "\n--- stdout ---\n" + out + "--- stderr ---\n" + err + "---";
    }
};

// Runs `program args...` with stdin from /dev/null; kills it after `timeout`.
inline ProcessResult run_process(const std::string& program, const std::vector<std::string>& args,
                                 std::chrono::seconds timeout = std::chrono::seconds(300)) {
    ProcessResult r;
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) return r;
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        return r;
    }
    // argv is built before fork: the child of a threaded process may only call async-signal-safe functions.
    std::vector<std::string> storage{program};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);

    const pid_t pid = fork();
    if (pid == 0) {
        const int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        dup2(out_pipe[1], STDOUT_FILENO);
        dup2(err_pipe[1], STDERR_FILENO);
        execv(program.c_str(), argv.data());
        _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (pid < 0) {
        close(out_pipe[0]);
        close(err_pipe[0]);
        return r;
    }

    // Both pipes are drained together so that a child filling one of them never blocks.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    std::string* sinks[2] = {&r.out, &r.err};
    int open_fds = 2;
    while (open_fds > 0) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            r.timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        if (poll(fds, 2, static_cast<int>(left.count())) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[65536];
            const ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                sinks[i]->append(buf, static_cast<size_t>(n));
            } else if (n == 0 || errno != EINTR) {
                close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    for (pollfd& f : fds)
        if (f.fd >= 0) close(f.fd);

    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(status) && !r.timed_out) {
        r.exited = true;
        r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r.signal = WTERMSIG(status);
    }
    return r;
}

inline ProcessResult run_kiln(const std::vector<std::string>& args,
                              std::chrono::seconds timeout = std::chrono::seconds(300)) {
    // The program would ask OpenBLAS for other kernels than this test runs where OpenBLAS took its
    // generic ones (runtime/openblas_core.h); the tests that compare its images with the library's
    // want the same float rounding, so it gets the kernels this process has.
    if (!std::getenv("OPENBLAS_CORETYPE"))
        if (const std::string core = openblas_core_name(); !core.empty()) setenv("OPENBLAS_CORETYPE", core.c_str(), 0);
    return run_process(KILN_CLI, args, timeout);
}

}  // namespace kiln::test
