// How fast weights reach a GPU from their host copies, timed now: what `kiln plan` turns the bytes a placement
// uploads again (GpuMemoryPlan::uploads_per_generation / _per_unet_call) into seconds with. The bus, the driver and
// the host's memory all count, so it is measured rather than looked up (a PCIe 3.0 x16 slot, an RX 580's, moves
// about 12 GB/s at best; lavapipe copies within host memory).
#pragma once
#include "core/backend.h"

namespace kiln {

// Bytes a second of one 32 MiB upload from memory the backend's allocate_host gives (page-locked where it can),
// the best of three after one untimed.
double measure_upload_rate(Backend& backend);

}  // namespace kiln
