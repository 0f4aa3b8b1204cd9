// A CUDA injection library that records when each kernel ran, graph replays included, without serialising
// them (ncu runs each kernel alone; kiln's --profile puts events around every op; the GPU machine has no nsys).
//
// Build (here), one line:
//   g++ -shared -fPIC -O2 -I/usr/local/cuda/include scripts/experiments/kernel_timeline.cpp
//       -L/usr/local/cuda/lib64 -lcupti -o .stage-cuda/kernel_timeline.so
// Use (device), one line, then the summary:
//   LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib CUDA_INJECTION64_PATH=$PWD/.stage-cuda/kernel_timeline.so
//       KILN_KERNEL_TIMELINE=/tmp/k.csv scripts/run-on-device.sh kiln bench ...
//   python3 scripts/kernel-timeline-summary.py /tmp/k.csv gaps
// The CSV has one row per kernel, memset and memcpy (named so): start and end in ns of the GPU's clock, graph and
// node id (0 outside a graph), grid size and the mangled name.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Row {
  uint64_t start, end;
  uint32_t graph;
  uint64_t node;
  uint32_t grid;
  std::string name;
};

std::mutex rows_mutex;
std::vector<Row> rows;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(rows_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      rows.push_back({k->start, k->end, k->graphId, k->graphNodeId, uint32_t(k->gridX) * k->gridY * k->gridZ,
                      k->name ? k->name : "?"});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      rows.push_back({m->start, m->end, m->graphId, m->graphNodeId, 0, "memset " + std::to_string(m->bytes)});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      rows.push_back({m->start, m->end, m->graphId, m->graphNodeId, 0,
                      "memcpy kind " + std::to_string(m->copyKind) + " " + std::to_string(m->bytes)});
    }
  }
  free(buffer);
}

void write_rows() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("KILN_KERNEL_TIMELINE");
  FILE* f = std::fopen(path ? path : "kernel_timeline.csv", "w");
  if (!f) return;
  std::fprintf(f, "start,end,graph,node,grid,name\n");
  std::lock_guard<std::mutex> lock(rows_mutex);
  for (const Row& r : rows) {
    std::fprintf(f, "%llu,%llu,%u,%llu,%u,%s\n", (unsigned long long)r.start, (unsigned long long)r.end,
                 r.graph, (unsigned long long)r.node, r.grid, r.name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_timeline: %zu kernels, memsets and copies written\n", rows.size());
}

}  // namespace

extern "C" int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_timeline: CUPTI refused to trace kernels\n");
    return 0;
  }
  std::atexit(write_rows);
  return 1;
}
