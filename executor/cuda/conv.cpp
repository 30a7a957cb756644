#include "executor/cuda/conv.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "executor/cuda/check.hpp"
#include "executor/cuda/conv_graph_api.hpp"
#include "executor/cuda/conv_problem.hpp"
#include "executor/cuda/kernels.hpp"
#include "executor/watchdog.hpp"

namespace hios::cuda {

namespace {

using graph_api::alignment_of;
using graph_api::BeExec;
using graph_api::BeGraph;
using graph_api::BeP;
using graph_api::build_graph;
using graph_api::engine_info;
using graph_api::EngineInfo;
using graph_api::heuristic_configs;
using graph_api::kUidB;
using graph_api::kUidW;
using graph_api::kUidX;
using graph_api::kUidY;
using graph_api::kUidZ;
using graph_api::make_plan;
using graph_api::plan_workspace;

// ---------------------------------------------------------------------------------------------
// The choice, cached per device and problem signature.

enum class Impl { GraphFused, GraphConv, Legacy, Depthwise, Direct, PhaseSplit, ChannelPad };

struct Choice {
  Impl impl = Impl::Legacy;
  BeP plan;                        // graph API
  std::shared_ptr<BeGraph> graph;  // keeps the plan's descriptors alive
  bool graph_bias = false;         // the fused graph reads the bias
  cudnnConvolutionFwdAlgo_t algo{};
  cudnnMathType_t math{};
  bool legacy_fused = false;
  int config_index = -1;           // graph API: position in heuristic_configs_for's list
  int depthwise_variant = 0;       // hios depthwise: DepthwiseParams::variant
  std::shared_ptr<Choice> inner;   // phase split, channel pad: the choice of the convolution inside
  int64_t pad_channels = 0;        // channel pad: the width of a padded pixel
  size_t workspace = 0;
  double ms = 0;
  std::string what;
  std::string tried;  // every candidate timed and its time, for the profile database's readers
};

struct ChoiceCache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Choice>> entries;
};
ChoiceCache& choice_cache(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<ChoiceCache>> caches;
  std::lock_guard<std::mutex> lock(mu);
  auto& c = caches[device];
  if (!c) c = std::make_unique<ChoiceCache>();
  return *c;
}

// The choice for a problem (defined below; the phase split's candidate asks it for its inner one).
std::shared_ptr<Choice> choice_for(PlanCtx& c, const ConvProblem& p);

// Runs what a candidate would run (relu pre-pass included) on the planning stream.
using Trial = std::function<void(cudaStream_t, cudnnHandle_t, void* ws, size_t ws_bytes)>;

void relu_pass(cudaStream_t st, const ConvProblem& p) {
  const Shape& s = p.x.shape;
  launch_bias_act(p.x.ptr, p.relu_tmp.ptr, nullptr, act_code(Activation::Relu), s.n, s.c, s.h * s.w, 0, p.x.elem, st);
}

std::string key_of(const ConvProblem& p, const void* x, PhaseSplit forced_phases, ChannelPad forced_pad) {
  const Shape& s = p.x.shape;
  // A whole tensor's signature is unchanged by row splits (recorded recipes stay valid); a
  // band's unequal H paddings, or its hios-only geometry, add to it.
  std::string band;
  if (p.pad_bottom != p.padding[0]) band += strprintf(" post%d", p.pad_bottom);
  if (!p.cudnn_ok) band += " hios-only";
  // Layouts are problems of their own; NCHW keys stay as they were (recorded recipes).
  if (p.x.nhwc()) band += " nhwc";
  if (p.residual()) band += " residual";
  // A forced phase split (the tests) must not answer for the timed choice, nor the other way.
  if (p.phases > 0 && forced_phases != PhaseSplit::Timed) {
    band += forced_phases == PhaseSplit::Always ? " phases always" : " phases never";
  }
  // A problem the channel pad may answer is one of its own: the padded problem inside has the
  // channels of an image that may be padded further, and must not recall that one's choice.
  if (!p.channel_pads.empty()) {
    band += forced_pad == ChannelPad::Always ? " pad always" : forced_pad == ChannelPad::Never ? " pad never" : " pad";
  }
  if (p.x.elem != Elem::F32) {
    // 16-bit storage: the exact alignments (a band's pointer may sit at any element).
    band += strprintf(" al%lld,%lld,%lld", (long long)alignment_of(x, p.x.elem),
                      (long long)alignment_of(p.y.ptr, p.x.elem), (long long)alignment_of(p.w, p.x.elem));
  }
  return strprintf("x%lldx%lldx%lldx%lld w%lldx%lldx%dx%d p%d,%d s%d,%d d%d,%d g%lld %s b%d %s%s a%d%d%d",
                   (long long)s.n, (long long)s.c, (long long)s.h, (long long)s.w, (long long)p.out_channels,
                   (long long)(s.c / p.groups), p.kernel[0], p.kernel[1], p.padding[0], p.padding[1], p.stride[0],
                   p.stride[1], p.dilation[0], p.dilation[1], (long long)p.groups,
                   p.x.elem == Elem::F16 ? "fp16" : p.x.elem == Elem::BF16 ? "bf16" : p.fp32 ? "fp32" : "tf32",
                   int(p.b != nullptr), activation_name(p.act), p.input_relu ? " relu-in" : "", int(aligned16(x)),
                   int(aligned16(p.y.ptr)), int(aligned16(p.w))) +
         band;
}

// The graph API's candidate configurations of one operation graph, in a fixed order: a
// recipe names its choice by position here (the heuristics answer alike for the same device,
// cuDNN and problem, which the profile database's identity pins). The first 12 of heuristic
// mode A and 4 of the fallback list come first, as they always have (recipes recorded before
// the list grew name positions there); the rest of both lists follow, for the wide search.
// `quick_end`, when given, gets the length of that first part: the quick search looks no further.
std::vector<BeP> heuristic_configs_for(const BeGraph& g, size_t* quick_end = nullptr) {
  std::vector<BeP> cfgs = heuristic_configs(g, CUDNN_HEUR_MODE_A, 12);
  for (BeP& extra : heuristic_configs(g, CUDNN_HEUR_MODE_FALLBACK, 4)) cfgs.push_back(extra);
  if (quick_end) *quick_end = cfgs.size();
  std::vector<BeP> more = heuristic_configs(g, CUDNN_HEUR_MODE_A, 40);
  for (size_t i = 12; i < more.size(); ++i) cfgs.push_back(more[i]);
  more = heuristic_configs(g, CUDNN_HEUR_MODE_FALLBACK, 16);
  for (size_t i = 4; i < more.size(); ++i) cfgs.push_back(more[i]);
  return cfgs;
}

// Engines hios may run: no down-conversion to half precision, deterministic (a captured graph
// replays the eager result bit for bit), no TF32 in fp32 mode, and precompiled unless the search
// is wide. Engines compiled at run time (NVRTC) take up to a second each to finalize, once per
// signature and process; the wide search pays that for what may be the fastest kernel (on
// deeplabv3's dilated 3x3 convolutions in TF32, torch.compile ran a kernel faster than every
// precompiled engine cuDNN offered hios).
bool usable_engine(const EngineInfo& info, bool fp32, bool wide) {
  return !info.down_convert && !info.nondeterministic && !(fp32 && info.tensor_core) && (wide || !info.runtime_compiled);
}

// A graph-API choice: configuration `index` of heuristic_configs_for, planned as `plan`.
std::shared_ptr<Choice> graph_choice(bool fused, const std::shared_ptr<BeGraph>& g, const BeP& plan, size_t workspace,
                                     int index, const EngineInfo& info) {
  auto ch = std::make_shared<Choice>();
  ch->impl = fused ? Impl::GraphFused : Impl::GraphConv;
  ch->plan = plan;
  ch->graph = g;
  ch->graph_bias = fused && g->has_bias;
  ch->workspace = workspace;
  ch->config_index = index;
  ch->what = strprintf("graph engine %lld (config %d)%s%s", (long long)info.index, index, fused ? " fused" : " + epilogue",
                       info.tensor_core ? " tc" : "");
  return ch;
}

// Recipes adopted from a profile database, per device: signature key -> recipe.
struct RecipeBook {
  std::mutex mu;
  std::map<std::string, json> entries;
};
RecipeBook& recipe_book(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<RecipeBook>> books;
  std::lock_guard<std::mutex> lock(mu);
  auto& b = books[device];
  if (!b) b = std::make_unique<RecipeBook>();
  return *b;
}

const char* impl_recipe_name(Impl i) {
  switch (i) {
    case Impl::GraphFused: return "graph-fused";
    case Impl::GraphConv: return "graph";
    case Impl::Legacy: return "legacy";
    case Impl::Depthwise: return "depthwise";
    case Impl::Direct: return "direct";
    case Impl::PhaseSplit: return "phase-split";
    case Impl::ChannelPad: return "channel-pad";
  }
  return "?";
}

json recipe_of(const Choice& ch) {
  json r = json::object();
  r["impl"] = impl_recipe_name(ch.impl);
  if (ch.impl == Impl::GraphFused || ch.impl == Impl::GraphConv) r["config"] = ch.config_index;
  if (ch.impl == Impl::Depthwise) r["variant"] = ch.depthwise_variant;
  if (ch.impl == Impl::PhaseSplit || ch.impl == Impl::ChannelPad) r["inner"] = recipe_of(*ch.inner);
  if (ch.impl == Impl::ChannelPad) r["channels"] = ch.pad_channels;
  if (ch.impl == Impl::Legacy) {
    r["algo"] = int(ch.algo);
    r["math"] = int(ch.math);
    r["fused"] = ch.legacy_fused;
  }
  r["ms"] = ch.ms;
  if (!ch.tried.empty()) r["tried"] = ch.tried;
  return r;
}

// Rebuilds a recorded choice without timing anything; null when the recipe does not fit this
// problem any more (then the caller times the candidates as usual).
std::shared_ptr<Choice> rebuild(PlanCtx& c, const ConvProblem& p, const json& r) {
  const std::string impl = r.value("impl", std::string());
  const void* x = p.input_relu ? p.relu_tmp.ptr : p.x.ptr;
  auto ch = std::make_shared<Choice>();
  ch->ms = r.value("ms", 0.0);
  if (impl == "depthwise") {
    if (!depthwise_kernel_fits(p)) return nullptr;
    ch->impl = Impl::Depthwise;
    // Recipes from before the variants name none: variant 1 is the kernel they timed.
    const int64_t variant = r.value("variant", int64_t(1));
    if (variant != 0 && variant != 1) return nullptr;
    ch->depthwise_variant = int(variant);
    ch->what = variant == 0 ? "hios depthwise" : "hios depthwise rows";
  } else if (impl == "direct") {
    ch->impl = Impl::Direct;
    ch->what = "hios direct";
  } else if (impl == "graph-fused" || impl == "graph") {
    if (!p.cudnn_ok) return nullptr;
    const bool fused = impl == "graph-fused";
    const int64_t index = r.value("config", int64_t(-1));
    std::shared_ptr<BeGraph> g = build_graph(c.res.cudnn(), p, x, fused);
    if (!g) return nullptr;
    const std::vector<BeP> cfgs = heuristic_configs_for(*g);
    if (index < 0 || index >= int64_t(cfgs.size())) return nullptr;
    const EngineInfo info = engine_info(cfgs[size_t(index)]);
    if (!usable_engine(info, p.fp32, c.eng.wide_conv_search())) return nullptr;
    BeP plan = make_plan(c.res.cudnn(), cfgs[size_t(index)]);
    if (!plan) return nullptr;
    size_t ws_bytes = 0;
    (void)c.eng.find_workspace(&ws_bytes);
    const int64_t need = plan_workspace(plan);
    if (need < 0 || size_t(need) > ws_bytes) return nullptr;
    const double ms = ch->ms;
    ch = graph_choice(fused, g, plan, size_t(need), int(index), info);
    ch->ms = ms;
  } else if (impl == "phase-split") {
    if (p.phases < 2 || !r.contains("inner") || !r["inner"].is_object()) return nullptr;
    std::shared_ptr<Choice> inner = rebuild(c, inner_problem(p), r["inner"]);
    if (!inner) return nullptr;
    ch->impl = Impl::PhaseSplit;
    ch->inner = inner;
    ch->workspace = inner->workspace;
    ch->what = strprintf("phase split %dx%d (%s)", p.phases, p.phases, inner->what.c_str());
  } else if (impl == "channel-pad") {
    const ConvProblem::ChannelPad* pad = channel_pad_of(p, r.value("channels", int64_t(0)));
    if (!pad || !r.contains("inner") || !r["inner"].is_object()) return nullptr;
    std::shared_ptr<Choice> inner = rebuild(c, padded_problem(p, *pad), r["inner"]);
    if (!inner) return nullptr;
    ch->impl = Impl::ChannelPad;
    ch->inner = inner;
    ch->pad_channels = pad->channels;
    ch->workspace = inner->workspace;
    ch->what = strprintf("channel pad %lld->%lld (%s)", (long long)p.x.shape.c, (long long)pad->channels,
                         inner->what.c_str());
  } else if (impl == "legacy") {
    const int64_t algo = r.value("algo", int64_t(-1)), math = r.value("math", int64_t(-1));
    if (!legacy_fits(p)) return nullptr;
    if (algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || math < 0 || math > 3) return nullptr;
    if (!legacy_algo_keeps_nan(cudnnConvolutionFwdAlgo_t(algo))) return nullptr;
    if (p.fp32 && cudnnMathType_t(math) != CUDNN_FMA_MATH) return nullptr;
    LegacyDescs d(p);
    HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, cudnnMathType_t(math)));
    size_t need = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(c.res.cudnn(), d.x, d.w, d.conv, d.y, cudnnConvolutionFwdAlgo_t(algo),
                                                &need) != CUDNN_STATUS_SUCCESS) {
      return nullptr;
    }
    ch->impl = Impl::Legacy;
    ch->algo = cudnnConvolutionFwdAlgo_t(algo);
    ch->math = cudnnMathType_t(math);
    ch->legacy_fused = r.value("fused", false);
    ch->workspace = need;
    ch->what = strprintf("legacy algo %d%s", int(algo), ch->legacy_fused ? " fused" : " + epilogue");
  } else {
    return nullptr;
  }
  ch->what += strprintf(" %.3f ms (recalled)", ch->ms);
  return ch;
}

// The implementations one convolution may run, each with the trial that times it.
struct Candidates {
  std::vector<std::shared_ptr<Choice>> choices;
  std::vector<Trial> trials;
  void add(std::shared_ptr<Choice> ch, Trial t) {
    choices.push_back(std::move(ch));
    trials.push_back(std::move(t));
  }
};

// What the cuDNN candidates' trials share: the input they read (the ReLU's output in scratch
// when a ReLU comes first), the ReLU pre-pass, and the epilogue's activation and geometry.
struct TrialInputs {
  const void* x = nullptr;
  std::function<void(cudaStream_t)> pre;
  int act = 0;
  Shape ys;
  int nhwc = 0;
  Elem elem = Elem::F32;
};

TrialInputs trial_inputs(const ConvProblem& p) {
  TrialInputs in;
  in.x = p.input_relu ? p.relu_tmp.ptr : p.x.ptr;
  in.pre = [p](cudaStream_t st) {
    if (p.input_relu) relu_pass(st, p);
  };
  in.act = act_code(p.act);
  in.ys = p.y.shape;
  in.nhwc = p.y.nhwc() ? 1 : 0;
  in.elem = p.y.elem;
  return in;
}

// cuDNN's graph API: the fused convolution (up to 3 engines of the heuristics), then the
// convolution alone with the epilogue kernel (up to 6), each within the workspace.
void add_graph_candidates(PlanCtx& c, const ConvProblem& p, const TrialInputs& in, Candidates& out) {
  StreamResources& res = c.res;
  size_t ws_bytes = 0;
  (void)c.eng.find_workspace(&ws_bytes);
  for (bool fused : {true, false}) {
    if (fused && p.b == nullptr && p.act == Activation::None && !p.residual()) continue;  // nothing to fuse
    // cuDNN's pointwise ops here are relu, sigmoid and tanh: the epilogue kernel clips (relu6) and
    // computes hard-swish.
    if (fused && (p.act == Activation::Relu6 || p.act == Activation::HardSwish)) continue;
    std::shared_ptr<BeGraph> g = build_graph(res.cudnn(), p, in.x, fused);
    if (!g) continue;
    size_t quick_end = 0;
    const std::vector<BeP> cfgs = heuristic_configs_for(*g, &quick_end);
    std::vector<int64_t> seen;
    int built = 0;
    // The quick search times the first few distinct engines. The wide one times every
    // configuration: cuDNN lists one engine several times with other knobs (tile sizes), and on
    // ResNet-50's 1x1 and strided convolutions in TF32 a second configuration of the first
    // engine was up to 30% faster than the first.
    const bool wide = c.eng.wide_conv_search();
    const int most = wide ? 16 : fused ? 3 : 6;
    for (size_t ci = 0; ci < (wide ? cfgs.size() : quick_end); ++ci) {
      const BeP& cfg = cfgs[ci];
      if (built >= most) break;
      const EngineInfo info = engine_info(cfg);
      if (!usable_engine(info, p.fp32, wide)) continue;
      if (!wide && std::find(seen.begin(), seen.end(), info.index) != seen.end()) continue;
      seen.push_back(info.index);
      BeP plan = make_plan(res.cudnn(), cfg);
      if (!plan) continue;
      const int64_t need = plan_workspace(plan);
      if (need < 0 || size_t(need) > ws_bytes) continue;
      ++built;
      std::shared_ptr<Choice> ch = graph_choice(fused, g, plan, size_t(need), int(ci), info);
      auto exec = std::make_shared<BeExec>();
      exec->graph = g;
      exec->plan = plan;
      exec->uids = {kUidX, kUidW, kUidY};
      exec->ptrs = {const_cast<void*>(in.x), const_cast<void*>(p.w), p.y.ptr};
      if (ch->graph_bias) {
        exec->uids.push_back(kUidB);
        exec->ptrs.push_back(const_cast<void*>(p.b));
      }
      if (g->has_residual) {
        exec->uids.push_back(kUidZ);
        exec->ptrs.push_back(p.z.ptr);
      }
      const void* b = p.b;
      const void* z = p.z.ptr;
      void* y = p.y.ptr;
      out.add(ch, [exec, fused, b, z, y, in](cudaStream_t st, cudnnHandle_t h, void* w, size_t) {
        in.pre(st);
        exec->run(h, w);
        if (!fused) launch_bias_act(y, y, b, in.act, in.ys.n, in.ys.c, in.ys.h * in.ys.w, in.nhwc, in.elem, st, z);
      });
    }
  }
}

// The legacy API: the algorithm cudnnFind chose, fused with the bias and activation
// (cudnnConvolutionBiasActivationForward) where that call takes the problem.
void add_legacy_candidate(PlanCtx& c, const ConvProblem& p, const std::string& key, const TrialInputs& in,
                          Candidates& out) {
  Engine& eng = c.eng;
  StreamResources& res = c.res;
  size_t ws_bytes = 0;
  void* ws = eng.find_workspace(&ws_bytes);
  const void* x = in.x;
  auto d = std::make_shared<LegacyDescs>(p);
  ConvChoice& lc = eng.find_conv(key, res, d->x, x, d->w, p.w, d->conv, d->y, p.y.ptr, p.fp32);
  HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, lc.math));
  auto ch = std::make_shared<Choice>();
  ch->impl = Impl::Legacy;
  ch->algo = lc.algo;
  ch->math = lc.math;
  ch->workspace = lc.workspace;
  // cudnnConvolutionBiasActivationForward: ReLU with any algorithm; no activation only with
  // IMPLICIT_PRECOMP_GEMM; a bias is required (the zero one stands in).
  ch->legacy_fused = p.act == Activation::Relu ||
                     (p.act == Activation::None && p.b && lc.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  const void* bias = p.b ? p.b : eng.zeros(p.out_channels, res.stream());
  if (ch->legacy_fused) {
    HIOS_CUDA_CHECK(cudaStreamSynchronize(res.stream()));
    // With the workspace a launch will have (cudnnFind's, for the plain convolution): the
    // fused call may want more, and would then refuse with BAD_PARAM only when it runs.
    const cudnnStatus_t s = cudnnConvolutionBiasActivationForward(
        res.cudnn(), &kOne, d->x, x, d->w, p.w, d->conv, lc.algo, ws, std::min(ws_bytes, lc.workspace),
        p.residual() ? &kOne : &kZero, d->y, p.residual() ? p.z.ptr : p.y.ptr, d->b, bias, d->act, d->y, p.y.ptr);
    if (s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM) {
      ch->legacy_fused = false;
    } else if (s != CUDNN_STATUS_SUCCESS) {
      fail_cudnn(s, "cudnnConvolutionBiasActivationForward (trial)", __FILE__, __LINE__);
    }
  }
  ch->what = strprintf("legacy algo %d%s", int(lc.algo), ch->legacy_fused ? " fused" : " + epilogue");
  const bool lf = ch->legacy_fused;
  const cudnnConvolutionFwdAlgo_t algo = lc.algo;
  const void* w = p.w;
  const void* b = p.b;
  const void* z = p.z.ptr;
  void* y = p.y.ptr;
  out.add(ch, [d, lf, algo, x, w, b, z, bias, y, in](cudaStream_t st, cudnnHandle_t h, void* wsp, size_t wsb) {
    in.pre(st);
    if (lf) {
      HIOS_CUDNN_CHECK(cudnnConvolutionBiasActivationForward(h, &kOne, d->x, x, d->w, w, d->conv, algo, wsp, wsb,
                                                             z ? &kOne : &kZero, d->y, z ? z : y, d->b, bias, d->act,
                                                             d->y, y));
    } else {
      HIOS_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, d->x, x, d->w, w, d->conv, algo, wsp, wsb, &kZero, d->y, y));
      launch_bias_act(y, y, b, in.act, in.ys.n, in.ys.c, in.ys.h * in.ys.w, in.nhwc, in.elem, st, z);
    }
  });
}

// hios's depthwise kernel. NHWC square windows have two (4 x 4 output tiles, or runs of one
// row); which is faster depends on the shape, so both are timed.
void add_depthwise_candidates(const ConvProblem& p, Candidates& out) {
  const bool two = p.x.nhwc() && p.kernel[0] == p.kernel[1] && p.stride[0] == p.stride[1] &&
                   (p.kernel[0] == 3 || p.kernel[0] == 5 || p.kernel[0] == 7);
  for (int variant = 0; variant < (two ? 2 : 1); ++variant) {
    auto ch = std::make_shared<Choice>();
    ch->impl = Impl::Depthwise;
    ch->depthwise_variant = variant;
    ch->what = variant == 0 ? "hios depthwise" : "hios depthwise rows";
    DepthwiseParams dp = depthwise_params(p);
    dp.variant = variant;
    const ResidualEpilogue after = residual_epilogue(p);
    out.add(ch, [dp, after](cudaStream_t st, cudnnHandle_t, void*, size_t) {
      launch_depthwise(dp, st);
      after(st);
    });
  }
}

// hios's direct kernel, for a problem no other candidate takes (a band whose unequal paddings
// no graph-API engine accepts, or every other candidate refused when it ran): slow, but it
// computes any convolution.
std::shared_ptr<Choice> direct_choice(const char* what) {
  auto ch = std::make_shared<Choice>();
  ch->impl = Impl::Direct;
  ch->what = what;
  return ch;
}
Trial direct_trial(const ConvProblem& p) {
  const DirectConvParams dp = direct_params(p);
  const ResidualEpilogue after = residual_epilogue(p);
  return [dp, after](cudaStream_t st, cudnnHandle_t, void*, size_t) {
    launch_conv_direct(dp, st);
    after(st);
  };
}

// Times every candidate on the planning stream (time_on_stream) and keeps the fastest. One that
// cuDNN refuses when it runs (it checks some constraints only then) drops out; if all do, the
// direct kernel runs.
std::shared_ptr<Choice> keep_fastest(PlanCtx& c, const ConvProblem& p, const std::string& key, Candidates& cands) {
  StreamResources& res = c.res;
  size_t ws_bytes = 0;
  void* ws = c.eng.find_workspace(&ws_bytes);
  const size_t n = cands.choices.size();
  size_t best = 0;
  std::string tried;
  for (size_t i = 0; i < n; ++i) {
    Choice& ch = *cands.choices[i];
    const Trial& t = cands.trials[i];
    try {
      // Each candidate gets the workspace its launches will get, no more: one that needs more
      // than it asked for is refused here, not in a pass.
      const size_t given = std::min(ws_bytes, ch.workspace);
      exec::note_main_thread_activity(strprintf("node '%s': timing convolution candidate %zu of %zu, %s, for %s",
                                                c.node_name.c_str(), i + 1, n, ch.what.c_str(), key.c_str()));
      // One several times slower than the best so far is timed once, not four times: cuDNN's
      // engine 0 took 18 to 72 ms on ResNet-50's convolutions at 1024 x 1024 on an H200,
      // against 0.05 ms for the best, and four times that at 2048.
      const double best_ms = cands.choices[best]->ms;
      const double give_up = i > 0 && std::isfinite(best_ms) ? 4 * best_ms + 2.0 : INFINITY;
      ch.ms = time_on_stream(res.stream(), [&] { t(res.stream(), res.cudnn(), ws, given); }, give_up);
    } catch (const Error& e) {
      ch.ms = INFINITY;
      ch.what += std::string(" refused: ") + e.what();
    }
    if (ch.ms < cands.choices[best]->ms) best = i;
    tried += strprintf("%s%s: %.4f ms", tried.empty() ? "" : "; ", ch.what.c_str(), ch.ms);
  }
  if (n == 0 || !std::isfinite(cands.choices[best]->ms)) {
    auto ch = direct_choice("hios direct (every other candidate refused)");
    const Trial t = direct_trial(p);
    ch->ms = time_on_stream(res.stream(), [&] { t(res.stream(), res.cudnn(), nullptr, 0); });
    cands.add(ch, t);
    best = cands.choices.size() - 1;
  }
  exec::note_main_thread_activity("");
  HIOS_CHECK(std::isfinite(cands.choices[best]->ms), "node '%s': no convolution implementation ran for %s",
             c.node_name.c_str(), key.c_str());
  std::shared_ptr<Choice> ch = cands.choices[best];
  ch->what += strprintf(" %.3f ms (of %zu candidates)", ch->ms, cands.choices.size());
  ch->tried = tried;
  return ch;
}

// The launches of a choice for problem p, as a trial: what plan_convolution emits, and what
// the phase split times around its inner convolution.
Trial launch_of(PlanCtx& c, const ConvProblem& p, const Choice& ch) {
  const void* x = p.input_relu ? p.relu_tmp.ptr : p.x.ptr;
  const int act = act_code(p.act);
  const Shape ys = p.y.shape;
  const int nhwc = p.y.nhwc() ? 1 : 0;
  const Elem elem = p.y.elem;
  const ConvProblem prob = p;
  auto pre = [prob](cudaStream_t st) {
    if (prob.input_relu) relu_pass(st, prob);
  };
  const void* w = p.w;
  const void* b = p.b;
  const void* z = p.z.ptr;
  void* y = p.y.ptr;
  switch (ch.impl) {
    case Impl::Depthwise: {
      DepthwiseParams dp = depthwise_params(p);
      dp.variant = ch.depthwise_variant;
      const ResidualEpilogue after = residual_epilogue(p);
      return [dp, after](cudaStream_t st, cudnnHandle_t, void*, size_t) {
        launch_depthwise(dp, st);
        after(st);
      };
    }
    case Impl::Direct:
      return direct_trial(p);
    case Impl::GraphFused:
    case Impl::GraphConv: {
      auto exec = std::make_shared<BeExec>();
      exec->graph = ch.graph;
      exec->plan = ch.plan;
      exec->uids = {kUidX, kUidW, kUidY};
      exec->ptrs = {const_cast<void*>(x), const_cast<void*>(w), y};
      if (ch.graph_bias) {
        exec->uids.push_back(kUidB);
        exec->ptrs.push_back(const_cast<void*>(b));
      }
      if (ch.graph->has_residual) {
        exec->uids.push_back(kUidZ);
        exec->ptrs.push_back(p.z.ptr);
      }
      const bool epilogue = ch.impl == Impl::GraphConv;
      return [exec, epilogue, b, z, act, ys, y, pre, nhwc, elem](cudaStream_t st, cudnnHandle_t h, void* ws, size_t) {
        pre(st);
        exec->run(h, ws);
        if (epilogue) launch_bias_act(y, y, b, act, ys.n, ys.c, ys.h * ys.w, nhwc, elem, st, z);
      };
    }
    case Impl::Legacy: {
      auto d = std::make_shared<LegacyDescs>(p);
      HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, ch.math));
      const bool lf = ch.legacy_fused;
      const cudnnConvolutionFwdAlgo_t algo = ch.algo;
      const void* bias = p.b ? p.b : c.eng.zeros(p.out_channels, c.res.stream());
      const std::string what = ch.what, key = key_of(p, x, c.eng.phase_split(), c.eng.channel_pad());
      return [d, lf, algo, x, w, b, z, bias, y, act, ys, pre, nhwc, elem, key, what](cudaStream_t st, cudnnHandle_t h,
                                                                                     void* ws, size_t wsb) {
        pre(st);
        if (lf) {
          const cudnnStatus_t s = cudnnConvolutionBiasActivationForward(
              h, &kOne, d->x, x, d->w, w, d->conv, algo, ws, wsb, z ? &kOne : &kZero, d->y, z ? z : y, d->b, bias,
              d->act, d->y, y);
          // The trial at planning ran this call; say which problem refused it now, and with what.
          if (s != CUDNN_STATUS_SUCCESS) {
            const std::string call = strprintf("cudnnConvolutionBiasActivationForward (%s, workspace %zu bytes) for %s",
                                               what.c_str(), wsb, key.c_str());
            fail_cudnn(s, call.c_str(), __FILE__, __LINE__);
          }
        } else {
          HIOS_CUDNN_CHECK(
              cudnnConvolutionForward(h, &kOne, d->x, x, d->w, w, d->conv, algo, ws, wsb, &kZero, d->y, y));
          launch_bias_act(y, y, b, act, ys.n, ys.c, ys.h * ys.w, nhwc, elem, st, z);
        }
      };
    }
    case Impl::PhaseSplit: {
      const Trial inner = launch_of(c, inner_problem(p), *ch.inner);
      const PhaseParams split = phase_params(p, false), merge = phase_params(p, true);
      return [inner, split, merge](cudaStream_t st, cudnnHandle_t h, void* ws, size_t wsb) {
        launch_phases(split, st);
        inner(st, h, ws, wsb);
        launch_phases(merge, st);
      };
    }
    case Impl::ChannelPad: {
      const ConvProblem::ChannelPad* pad = channel_pad_of(p, ch.pad_channels);
      HIOS_CHECK(pad, "node '%s': no channel pad of %lld", c.node_name.c_str(), (long long)ch.pad_channels);
      const Trial inner = launch_of(c, padded_problem(p, *pad), *ch.inner);
      const void* src = p.x.ptr;
      void* dst = pad->x.ptr;
      const Shape s = p.x.shape;
      const int64_t width = pad->channels;
      return [inner, src, dst, elem, s, width](cudaStream_t st, cudnnHandle_t h, void* ws, size_t wsb) {
        launch_pad_channels(src, dst, elem, s.n * s.h * s.w, s.c, width, st);
        inner(st, h, ws, wsb);
      };
    }
  }
  throw Error("plan_convolution: unknown implementation");
}

// The phase split as a candidate: its inner convolution's own best choice (chosen, or recalled,
// under the inner problem's signature), between the copies into and out of the phases.
void add_phase_candidate(PlanCtx& c, const ConvProblem& p, Candidates& out) {
  const ConvProblem ip = inner_problem(p);
  auto ch = std::make_shared<Choice>();
  ch->impl = Impl::PhaseSplit;
  ch->inner = choice_for(c, ip);
  ch->workspace = ch->inner->workspace;
  ch->what = strprintf("phase split %dx%d (%s)", p.phases, p.phases, ch->inner->what.c_str());
  out.add(ch, launch_of(c, p, *ch));
}

// The channel pad as a candidate: the padded convolution's own best choice (under its own
// signature), after the copy into the wider pixels.
void add_channel_pad_candidate(PlanCtx& c, const ConvProblem& p, const ConvProblem::ChannelPad& pad, Candidates& out) {
  auto ch = std::make_shared<Choice>();
  ch->impl = Impl::ChannelPad;
  ch->inner = choice_for(c, padded_problem(p, pad));
  ch->pad_channels = pad.channels;
  ch->workspace = ch->inner->workspace;
  ch->what = strprintf("channel pad %lld->%lld (%s)", (long long)p.x.shape.c, (long long)pad.channels,
                       ch->inner->what.c_str());
  out.add(ch, launch_of(c, p, *ch));
}

// The implementation a convolution runs: the families --conv-impl allows, each candidate timed.
std::shared_ptr<Choice> choose(PlanCtx& c, const ConvProblem& p, const std::string& key) {
  const ConvImpl only = c.eng.conv_impl();
  const bool want_hios = only == ConvImpl::Auto || only == ConvImpl::Hios;
  const bool legacy_ok = legacy_fits(p);
  const bool depthwise_ok = depthwise_kernel_fits(p);
  // A forced family that cannot compute a band (the legacy API and unequal paddings, hios on a
  // convolution that is not depthwise) gives way to the graph API.
  const bool want_graph = p.cudnn_ok && (only == ConvImpl::Auto || only == ConvImpl::Graph ||
                                         (only == ConvImpl::Legacy && !legacy_ok) ||
                                         (only == ConvImpl::Hios && !depthwise_ok && !legacy_ok));
  const bool want_legacy = only == ConvImpl::Auto || only == ConvImpl::Legacy;
  const TrialInputs in = trial_inputs(p);

  Candidates cands;
  const PhaseSplit phases = p.phases > 1 ? c.eng.phase_split() : PhaseSplit::Never;
  if (phases == PhaseSplit::Always) {
    add_phase_candidate(c, p, cands);
    return keep_fastest(c, p, key, cands);
  }
  if (phases == PhaseSplit::Timed) add_phase_candidate(c, p, cands);
  if (c.eng.channel_pad() != ChannelPad::Never) {
    for (const ConvProblem::ChannelPad& pad : p.channel_pads) add_channel_pad_candidate(c, p, pad, cands);
  }
  if (!p.channel_pads.empty() && c.eng.channel_pad() == ChannelPad::Always) return keep_fastest(c, p, key, cands);
  if (want_graph) add_graph_candidates(c, p, in, cands);
  // The legacy API is also a candidate when nothing else is (forcing hios on a convolution its
  // depthwise kernel cannot compute, or the graph API finding no engine).
  if (legacy_ok && (want_legacy || (only == ConvImpl::Hios && !depthwise_ok) ||
                    (only == ConvImpl::Graph && cands.choices.empty()))) {
    add_legacy_candidate(c, p, key, in, cands);
  }
  if (want_hios && depthwise_ok) add_depthwise_candidates(p, cands);
  if (cands.choices.empty()) cands.add(direct_choice("hios direct"), direct_trial(p));
  return keep_fastest(c, p, key, cands);
}

// The choice for p: this process's (per device and signature), a recipe adopted from a profile
// database rebuilt, or the candidates timed now.
std::shared_ptr<Choice> choice_for(PlanCtx& c, const ConvProblem& p) {
  const void* x = p.input_relu ? p.relu_tmp.ptr : p.x.ptr;
  const std::string key = key_of(p, x, c.eng.phase_split(), c.eng.channel_pad()) + " impl " + conv_impl_name(c.eng.conv_impl());
  ChoiceCache& cache = choice_cache(c.eng.device());
  std::shared_ptr<Choice> ch;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) ch = it->second;
  }
  if (!ch) {
    json recipe;
    {
      RecipeBook& book = recipe_book(c.eng.device());
      std::lock_guard<std::mutex> lock(book.mu);
      auto it = book.entries.find(key);
      if (it != book.entries.end()) recipe = it->second;
    }
    if (!recipe.is_null()) ch = rebuild(c, p, recipe);
    if (!ch) {
      const auto start = std::chrono::steady_clock::now();
      ch = choose(c, p, key);
      // A choice that takes seconds (cuDNN planning, or the slow direct kernel being timed) is
      // worth a line: it is where a loading program's time goes.
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s > 1.0) {
        std::fprintf(stderr, "hios: note: node '%s': choosing its convolution took %.1f s: %s (%s)\n",
                     c.node_name.c_str(), s, ch->what.c_str(), key.c_str());
      }
    }
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.entries.emplace(key, ch);
  }
  c.eng.note_conv(key, ch->what);
  return ch;
}

// Whether rebuild() can read a recipe's fields with the types it reads them as (a phase split's
// inner recipe included).
bool recipe_typed(const json& r, int depth = 0) {
  if (!r.is_object() || !r.contains("impl") || !r["impl"].is_string()) return false;
  bool typed = true;
  for (const char* f : {"config", "variant", "algo", "math", "channels"}) {
    typed = typed && (!r.contains(f) || r[f].is_number_integer());
  }
  typed = typed && (!r.contains("ms") || r["ms"].is_number()) && (!r.contains("fused") || r["fused"].is_boolean());
  if (r.contains("inner")) typed = typed && depth == 0 && recipe_typed(r["inner"], depth + 1);
  return typed;
}

}  // namespace

json conv_choices(int device) {
  json out = json::object();
  {
    RecipeBook& book = recipe_book(device);
    std::lock_guard<std::mutex> lock(book.mu);
    for (const auto& [key, r] : book.entries) out[key] = r;
  }
  ChoiceCache& cache = choice_cache(device);
  std::lock_guard<std::mutex> lock(cache.mu);
  for (const auto& [key, ch] : cache.entries) out[key] = recipe_of(*ch);
  return out;
}

void adopt_conv_choices(int device, const json& recipes) {
  HIOS_CHECK(recipes.is_object(), "algorithm choices: expected an object of signature -> recipe");
  RecipeBook& book = recipe_book(device);
  std::lock_guard<std::mutex> lock(book.mu);
  for (const auto& [key, r] : recipes.items()) {
    // Malformed recipes are skipped, not fatal: the choice is timed again instead.
    if (recipe_typed(r)) book.entries[key] = r;
  }
}

bool depthwise_kernel_fits(const ConvProblem& p) {
  const int64_t c = p.x.shape.c;
  // Dilated windows (DeepLab's and LR-ASPP's atrous backbones) run on the generic NHWC kernel,
  // where cuDNN's grouped kernels reached a twentieth of the memory bandwidth.
  const bool dilation_ok = (p.dilation[0] == 1 && p.dilation[1] == 1) || p.x.nhwc();
  return p.groups == c && p.out_channels == c && dilation_ok &&
         p.kernel[0] <= kMaxDepthwiseKernel && p.kernel[1] <= kMaxDepthwiseKernel && p.stride[0] <= kMaxDepthwiseStride &&
         p.stride[1] <= kMaxDepthwiseStride && c <= 65535 && p.x.shape.n <= 65535;
}

void plan_convolution(PlanCtx& c, const ConvProblem& p) {
  if (c.dry) return;
  const std::shared_ptr<Choice> ch = choice_for(c, p);
  c.workspace_need = std::max(c.workspace_need, ch->workspace);
  const Trial run = launch_of(c, p, *ch);
  c.emit([run](StreamResources& r) { run(r.stream(), r.cudnn(), r.workspace(), r.workspace_bytes()); });
}

}  // namespace hios::cuda
