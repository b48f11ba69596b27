#pragma once
// Checkpointing: what a training job writes every N iterations and how (a scenario's
// `checkpoint:` section). The writing itself is simulated with the data loader by sim/io.hpp.
//
//   sync   torch.save / DeepSpeed's default engine: after the optimizer step the state is copied
//          device -> host one chunk (tensor) at a time, serialized by the process's one thread
//          (the platform's host.torch_save_bandwidth) and written to the file before the next is
//          copied; training waits for all of it.
//   async  DataStates-LLM (Maurya et al., HPDC'24, arXiv 2406.10707; github.com/DataStates/
//          datastates-llm): the chunks are copied device -> a pinned host cache on a separate
//          stream while the next iteration's forward and backward run (the parameters and
//          optimizer state do not change until its optimizer step), DeepSpeed calls the engine's
//          wait() just before that step, and one host thread flushes the cache to the file in
//          the background. A copy blocks while the cache (a FIFO ring) is full.
// Where the platform gives them (models/platform.hpp), each save to the shared file system first
// blocks training for storage.shared.checkpoint_overhead, in both modes, and the async copies
// run at most at host_link.checkpoint_copy_bandwidth per GPU.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "comptrain/models/data_parallel.hpp"
#include "comptrain/traces/trace.hpp"

namespace comptrain::sim {

enum class CheckpointMode { sync, async };
std::string_view to_string(CheckpointMode mode);
std::optional<CheckpointMode> parse_checkpoint_mode(std::string_view text);

// Where training waits for an async checkpoint's device -> host copies (checkpoint.wait):
//   step  just before the next optimizer step, the copies overlapping the next forward and
//         backward: DataStates-LLM's lazy copies as the paper describes them (§5.1, Figure 5d),
//         and the wait() its DeepSpeed fork calls before optimizer.step()
//         (DataStates/DeepSpeed@de904bb4, deepspeed/runtime/engine.py, _take_model_step).
//   save  at the end of the save, before the next iteration starts: the released integration's
//         save_checkpoint ends with checkpoint_engine.commit(tag) (the same engine.py), and
//         DataStates-LLM's commit() calls wait(), which returns when the queue of device -> host
//         copies is empty (DataStates/datastates-llm@7dc12be8, datastates/llm/checkpointing.py,
//         ckpt/src/engine.cpp). The model waits for all of the checkpoint's copies there (an
//         upper bound: the engine's parser threads may not have queued every tensor by then).
// The flush to the file overlaps training either way.
enum class CheckpointWait { step, save };
std::string_view to_string(CheckpointWait wait);
std::optional<CheckpointWait> parse_checkpoint_wait(std::string_view text);

// Where bytes are read from or written to: the platform's shared parallel file system or the
// node-local disk (models::StorageSpec).
enum class StorageTier { shared, local };
std::string_view to_string(StorageTier tier);
std::optional<StorageTier> parse_storage_tier(std::string_view text);

// The scenario's `checkpoint:` section.
struct CheckpointSpec {
  int every = 1;  // iterations between checkpoints; the checkpoint is taken after the step of every `every`-th iteration
  CheckpointMode mode = CheckpointMode::sync;
  // async: the pinned host cache of each GPU's process (DataStates-LLM's host_cache_size);
  // 0: as large as that process's checkpoint (it never blocks).
  std::int64_t host_cache_bytes = 0;
  // The unit of one device -> host copy and one write: a tensor, or a flat buffer's piece.
  // 64 MiB by default (a design choice: large enough that per-request latency is small, small
  // enough that a host cache holds many).
  std::int64_t chunk_bytes = std::int64_t{64} << 20;
  StorageTier to = StorageTier::shared;
  CheckpointWait wait = CheckpointWait::step;  // async only
  // "FILE:LINE:COLUMN" of `to` and of `mode` (of the section when a key is not given; empty
  // when built in code), for check_io_inputs, which meets the platform later.
  std::string to_position = {};
  std::string mode_position = {};
};

// What one rank writes, in bytes.
struct CheckpointContents {
  std::int64_t parameters = 0;        // the weights (and buffers: BatchNorm statistics) in their training precision
  std::int64_t optimizer_states = 0;  // optimizer states and the fp32 master copy if any
  std::int64_t total() const { return parameters + optimizer_states; }
};

// Per rank, by ZeRO stage, as PyTorch DDP and DeepSpeed write checkpoints:
//   stage 0 (DDP)  rank 0 saves the model and optimizer state_dicts; other ranks nothing
//   stage 1, 2     each rank its optimizer shard (zero_pp_rank_R_mp_rank_00_optim_states.pt);
//                  rank 0 also the parameters (mp_rank_00_model_states.pt)
//   stage 3        each rank its parameter shard and its optimizer shard
// The shards are ZeRO's (models/zero_memory.hpp, model_states_per_gpu, ⌈Ψ/N⌉ elements).
struct CheckpointSizes {
  std::int64_t parameter_count = 0;  // Ψ
  CheckpointContents rank0;
  CheckpointContents other;  // every other rank
};

// The sizes from the trace: Ψ = its weight elements, the parameter and optimizer-state bytes
// per parameter from its weight and optimizer_state tensors (so precision and optimizer follow
// the trace, zoo or file). Under ZeRO (stage >= 1) with 4-byte weights DeepSpeed keeps an fp32
// master copy besides them (zero_memory.hpp, bytes_per_parameter's fp32_master_copy): 4 bytes
// more per parameter of optimizer state. `data_parallel` null: one GPU (rank 0 writes it all).
CheckpointSizes checkpoint_sizes(const traces::Trace& trace, const models::DataParallelSpec* data_parallel);

}  // namespace comptrain::sim
