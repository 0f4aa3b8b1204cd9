// Runs the built `kiln` program (KILN_CLI) with its stdout and stderr captured through temporary
// files (no pipes to drain), and reports how it ended.
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kiln::test {

struct CliResult {
    bool exited = false;  // false: killed by a signal (a crash)
    int exit_code = -1;
    std::string out, err;
    std::string describe() const {
        return (exited ? "exit code " + std::to_string(exit_code) : std::string("killed by a signal")) +
               "\n--- stdout ---\n" + out + "--- stderr ---\n" + err + "---";
    }
};

inline std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

inline CliResult run_cli(const std::vector<std::string>& args) {
    static int counter = 0;
    const std::string base = ::testing::TempDir() + "kiln_run_cli_" + std::to_string(getpid()) + "_" +
                             std::to_string(counter++);
    const std::string out_path = base + ".out", err_path = base + ".err";
    std::vector<std::string> storage{KILN_CLI};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);

    CliResult r;
    const pid_t pid = fork();
    if (pid == 0) {
        const int in = open("/dev/null", O_RDONLY);
        const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || out < 0 || err < 0) _exit(126);
        dup2(in, STDIN_FILENO);
        dup2(out, STDOUT_FILENO);
        dup2(err, STDERR_FILENO);
        execv(KILN_CLI, argv.data());
        _exit(127);
    }
    if (pid < 0) return r;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    r.exited = WIFEXITED(status);
    if (r.exited) r.exit_code = WEXITSTATUS(status);
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    std::remove(out_path.c_str());
    std::remove(err_path.c_str());
    return r;
}

}  // namespace kiln::test
