// The one interface every scheduler and the simulator use to ask "how long?".
//
// Implementations: AnalyticCostModel (roofline + stage and link models, device presets in
// schedules/devices.json, documented in docs/cost-model.md) and ProfileCostModel (the profile
// database the profiler writes; a missing entry is an error naming it).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/json_reader.hpp"
#include "scheduler/schedule.hpp"

namespace hios {

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;    // "analytic" or the database path
  virtual std::string device() const = 0;  // "h200", ...
  // Latency of one node running alone on a stream of `gpu`, in milliseconds.
  virtual double node_ms(const Graph& g, int node, int gpu) const = 0;
  // Latency of moving `bytes` from GPU src to GPU dst (0 when src == dst).
  virtual double transfer_ms(double bytes, int src, int dst) const = 0;
  // Latency of a stage: its groups run concurrently on one GPU, each group's nodes in order.
  virtual double stage_ms(const Graph& g, const Stage& stage, int gpu) const = 0;
  // A latency for running all of a stage's groups that no split of them into stages beats:
  // lower_bound_ms's work term. stage_ms, unless a model's stages cost more the more short
  // nodes they hold (short_node_us), which splitting a stage can avoid.
  virtual double stage_floor_ms(const Graph& g, const Stage& stage, int gpu) const { return stage_ms(g, stage, gpu); }
};

struct DevicePreset {
  std::string name;
  double peak_tflops = 0;         // dense fp32 / tf32 rate the convs see
  double mem_bandwidth_gbs = 0;   // device memory, GB/s
  double launch_overhead_us = 0;  // per kernel
  int sm_count = 0;
  double link_latency_us = 0;     // GPU-to-GPU
  double link_bandwidth_gbs = 0;  // GPU-to-GPU, one direction
  double stage_overhead_us = 0;   // event record/wait per stage boundary
  double alpha = 0;               // stage-model mixing weight (docs/cost-model.md)
  // Nodes this short overlap poorly across streams: a stage whose nodes average m us mixes in
  // the serial sum by a further short_node_us / (short_node_us + m) (docs/cost-model.md, "One
  // stage"). 0: off. Fitted concurrency (concurrency_fit.hpp) replaces it with its own alpha.
  double short_node_us = 0;
  // Added with the analytic model. peak_tflops is what convs see (TF32 tensor cores on Ampere
  // and later, as the CUDA backend runs them by default); fp32_tflops is the CUDA-core rate that
  // linear layers (run without TF32) and element-wise work see. 0 means "same as peak_tflops".
  std::string description;
  double fp32_tflops = 0;
  double conv_efficiency = 0.5;        // dense/grouped 1x1 conv (a plain GEMM), share of peak_tflops
  // Dense/grouped convs with a filter wider than 1x1 (implicit GEMM gathering its taps), share
  // of peak_tflops. cuDNN runs them further from peak than 1x1s, by a factor that differs by
  // device and math (docs/cost-model.md). 0: the same as conv_efficiency.
  double spatial_conv_efficiency = 0;
  // Tensor cores need the channels per group of a conv's input and output in multiples of this
  // (16 bytes: 4 for TF32, 8 for bf16); a conv that misses it runs on CUDA cores at fp32_tflops.
  // 1: every conv on tensor cores.
  int tensor_core_channels = 1;
  double depthwise_efficiency = 0.25;  // depthwise conv (one input channel per group), of fp32_tflops
  double gemm_efficiency = 0.6;        // linear layers, share of fp32_tflops
  double memory_efficiency = 0.8;      // share of mem_bandwidth_gbs a streaming kernel reaches
};

// Presets shipped in schedules/devices.json (h200, h100, a100, v100, and h200-fp32, h100-fp32,
// a100-fp32 for runs with TF32 off), compiled into the binary
// at configure time so that it works from any folder. A non-empty `file` reads that file
// instead (same format), e.g. a calibrated copy passed with --devices.
std::vector<DevicePreset> load_device_presets(const std::string& file = "");
// The efficiency of convs with a filter wider than 1x1: spatial_conv_efficiency, or
// conv_efficiency where a preset sets none.
double spatial_conv_efficiency(const DevicePreset& p);
DevicePreset find_device_preset(const std::string& name, const std::string& file = "");

// What a node achieved in `ms`: its counted FLOPs and bytes over that time, as shares of the
// device's peaks (peak_tflops, doubled for fp16/bf16; mem_bandwidth_gbs, with the graph's fp32
// byte counts halved for 16-bit storage). Memory-bound when the byte share is the larger. The
// measured launch order (executor/launch_order.hpp) and the profile database's classes use it.
struct NodeRates {
  double flops_per_s = 0, bytes_per_s = 0;
  double compute_share = 0, memory_share = 0;
  bool memory_bound = false;
};
NodeRates node_rates(const Node& nd, double ms, const DevicePreset& device, bool half = false);
// Whether a run under --math MATH stores and sends tensors in 16 bits (fp16, bf16): half the
// bytes the graph counts at float32 size. The `half` of node_rates and measured_order.
bool math_stores_16_bit(const std::string& math);
// The devices file format: {"format": "hios-devices", "version": 1, "devices": [...]}.
std::vector<DevicePreset> device_presets_from_json(const json& j, const std::string& source = "$");
// One entry of that file's "devices" array, as device_presets_from_json reads it back.
json device_preset_to_json(const DevicePreset& p);

// What the analytic model knows about one node running alone: the roofline terms summed over
// its kernels (a sequential node runs one kernel per step) and how much of the GPU it holds.
struct NodeEstimate {
  double ms = 0;           // alone on the GPU: sum over kernels of max(compute, memory) + launch
  double compute_ms = 0;   // FLOPs at the reachable rate for the kernel's parallelism
  double memory_ms = 0;    // bytes at the reachable bandwidth
  double launch_ms = 0;    // launch overhead, one per kernel
  double sm_ms = 0;        // busy time weighted by the share of SMs occupied (SM-milliseconds / SMs)
  int kernels = 0;
};
NodeEstimate analytic_node_estimate(const DevicePreset& p, const Graph& g, int node);

// Which of a preset's efficiencies prices a kernel of `op` reading `in`: tensor-core
// convolutions, depthwise convolutions (one input channel per group), linear layers (gemm), or
// everything else, bound by memory.
enum class KernelClass { Conv, Depthwise, Gemm, Memory };
KernelClass kernel_class(const Op& op, const Shape& in);
const char* kernel_class_name(KernelClass k);  // "conv", "depthwise", "gemm", "memory"
// The class of node `node`'s first kernel (a sequential's first step), on its assembled input.
KernelClass node_kernel_class(const Graph& g, int node);

// One node's demand on a shared GPU, as the stage model sees it. `ms` may be measured (profile
// model) while the other terms are analytic shares of it.
struct StageItem {
  double ms = 0;         // the node alone
  double sm_ms = 0;      // SM-capacity demand, in full-GPU milliseconds
  double memory_ms = 0;  // bandwidth demand, in full-bandwidth milliseconds
  double launch_ms = 0;  // host-side launch time (one launching thread serialises all streams)
};
// The stage model of docs/cost-model.md: one group is the sum of its nodes; several groups
// take max(longest group, total SM demand, total bandwidth demand, total launch time) blended
// with the plain sum by p.alpha, plus p.stage_overhead_us for the cross-stream events.
double combine_stage_ms(const DevicePreset& p, const std::vector<std::vector<StageItem>>& groups);
// combine_stage_ms without the short-node term: no split of the groups into stages is faster
// (docs/cost-model.md, "One stage"), the floor that stage_floor_ms gives.
double combine_stage_floor_ms(const DevicePreset& p, const std::vector<std::vector<StageItem>>& groups);

std::unique_ptr<CostModel> make_analytic_cost_model(const DevicePreset& preset);

// A stage's demand as the stage model sees it when node times are measured: each node's
// `nodes.node_ms`, with the SM, bandwidth and launch shares the analytic model of `preset`
// gives for the same node scaled to that time (docs/cost-model.md, "stages not measured").
// The profile cost model predicts unmeasured stages from it, and the tuner fits the
// concurrency model to measured stages through it.
std::vector<std::vector<StageItem>> measured_stage_items(const Graph& g, const Stage& stage, const CostModel& nodes,
                                                         const DevicePreset& preset, int gpu);
// stage_floor_ms of such a model: the stage's own time (`nodes.stage_ms`), or the combination
// of its measured items without the short-node term where that is lower.
double measured_stage_floor_ms(const Graph& g, const Stage& stage, const CostModel& nodes, const DevicePreset& preset,
                               int gpu);

// ---------------------------------------------------------------------------------------------
// Profile database (format in docs/cost-model.md). The profiler writes it; ProfileCostModel
// reads it. Keys are node_signature / stage_key, never node names, so one entry serves every
// node with the same op, attributes, input assembly and shapes.

// The op with every attribute as compact JSON, the input assembly (values summed with '+',
// terms listed in order), the output shape and the dtype, e.g.
//   {"op":"conv","out_channels":48,...,"activation":"relu"} in=[1x375x15x15] out=1x48x15x15 float32
// Everything that changes the kernels a node launches is in it; its name is not.
std::string node_signature(const Graph& g, int node);
// The key of a stage: per group the list of node signatures in run order, groups sorted, so
// that the same concurrent work is found whatever stream order a scheduler picked.
json stage_key(const Graph& g, const Stage& stage);
// stage_key(g, stage).dump() without building the JSON, from the nodes' signatures as
// `signature(v)` gives them (a caller that keeps them saves most of a search's time, which
// went to making keys).
std::string stage_key_text(const Stage& stage, const std::function<const std::string&(int)>& signature);

struct ProfileEntry {
  std::string key;  // node_signature
  double ms = 0;    // median over samples
  int64_t samples = 0;
  double stddev_ms = 0;
  std::string example;  // a node name it was measured on (informational)
  // GPU busy time of the node's kernels and copies (CUPTI), median over samples; -1 when not
  // measured. ms - kernel_ms is what launching costs the node on its stream (informational).
  double kernel_ms = -1;
  int64_t kernels = 0;  // kernels and copies per run (CUPTI), 0 when not measured
  // What the example node achieved in `ms`: its counted FLOPs and bytes over that time, in
  // TFLOP/s and GB/s, and whether the byte rate is the larger share of the device's peaks
  // (executor/launch_order.hpp's measured launch order). -1 when not classified.
  double achieved_tflops = -1, achieved_gbs = -1;
  int memory_bound = -1;
};
struct ProfileLink {
  int src = 0, dst = 0;
  double latency_us = 0, bandwidth_gbs = 0;
};
struct ProfileStage {
  json key;  // stage_key
  double ms = 0;
  int64_t samples = 0;
};
struct ProfileDb {
  std::string device;  // e.g. "h200"; also names the preset used for stages not measured
  json meta = json::object();  // free-form provenance (GPU, driver, cuDNN, date); kept as is
  // What the measurements depend on, as flat string fields: the device's name, the driver,
  // runtime, cuDNN and NCCL versions, the backend, the math mode and the graph's digest
  // (hios tune writes it; profile_identity_difference compares). Empty in older databases.
  json identity = json::object();
  // The concurrency model fitted from the measured stages (scheduler/concurrency_fit.hpp), as
  // its JSON; null when none was fitted. The cost model uses it for stages it has not measured.
  json concurrency = nullptr;
  // Measured cost of a pass beyond its GPU work (the barrier, the launch of the pass, the
  // host's wait), which a simulation of the stages does not contain. 0: not measured.
  double pass_overhead_ms = 0;
  // The backend's algorithm choices (CUDA: which convolution implementation runs each problem
  // signature), as the backend exports them: an object of signature -> recipe. A tune that
  // reuses the database adopts them instead of timing every implementation again. Valid only
  // under the same identity; an empty object when there are none.
  json choices = json::object();
  // hios tune's searches over this database ({"gpus", "streams", "candidates": [...]}), so
  // that a re-tune which measures nothing new re-times the same candidates without searching
  // again; null when none. Each candidate's schedule is checked against the graph on reuse.
  json searched = nullptr;
  std::vector<ProfileEntry> entries;
  std::vector<ProfileLink> links;
  std::vector<ProfileStage> stages;
};
ProfileDb profile_db_from_json(const json& j, const std::string& source = "$");
// "" when the two identities agree; otherwise one line naming every field that differs, e.g.
// "device 'NVIDIA H100 80GB HBM3' here, 'NVIDIA H200' in the database; cudnn '9.14.0' here, ...".
std::string profile_identity_difference(const json& database, const json& here);
ProfileDb load_profile_db(const std::string& file);
// How the database was measured, "layout" or "math": hios tune records it in the identity,
// hios profile in its provenance (meta); "" where neither says (older databases).
std::string profile_measured(const ProfileDb& db, const std::string& key);
// Bytes its links moved per byte a scheduler counts: the graph counts every tensor at float32
// size, and under --math bf16|fp16 the executor stores and sends 2 bytes per element (0.5),
// else 1. A link bandwidth measured there, applied to graph bytes, is divided by this.
double profile_link_bytes_per_graph_byte(const ProfileDb& db);
std::string profile_db_to_text(const ProfileDb& db);  // canonical, one entry per line
void save_profile_db(const ProfileDb& db, const std::string& file);  // atomic

// `name` is what errors and CostModel::name() call the database (normally its path). Stages
// not in the database combine measured node times with combine_stage_ms, taking the SM and
// bandwidth shares from the analytic model of `preset` (by default the preset named db.device).
std::unique_ptr<CostModel> make_profile_cost_model(ProfileDb db, const std::string& name,
                                                   const DevicePreset& preset);
// The profile database format is documented in docs/cost-model.md.
std::unique_ptr<CostModel> load_profile_cost_model(const std::string& file);

// "--cost analytic --device h200" or "--cost profile.json": the CLI's way of choosing.
std::unique_ptr<CostModel> make_cost_model(const std::string& cost, const std::string& device,
                                           const std::string& devices_file = "");

}  // namespace hios
