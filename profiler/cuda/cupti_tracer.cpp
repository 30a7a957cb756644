#include "profiler/cuda/cupti_tracer.hpp"

#include <cuda_runtime.h>
#include <cupti.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "graph/error.hpp"

namespace hios::prof {

namespace {

#define HIOS_CUPTI_CHECK(call)                                                          \
  do {                                                                                  \
    const CUptiResult r_ = (call);                                                      \
    if (r_ != CUPTI_SUCCESS) {                                                          \
      const char* s_ = nullptr;                                                         \
      cuptiGetResultString(r_, &s_);                                                    \
      ::hios::throw_error("CUPTI: %s failed: %s", #call, s_ ? s_ : "unknown error");    \
    }                                                                                   \
  } while (0)

// What the buffer callbacks (called on CUPTI's thread) collect, keyed by CUPTI's correlation
// id; collect() joins the two maps.
struct Records {
  std::mutex mu;
  std::map<uint32_t, BusyTime> by_correlation;  // device work per API call
  std::map<uint32_t, uint64_t> tag_of;          // API call -> pushed tag
  bool active = false;
};
Records& records() {
  static Records r;
  return r;
}

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI wants 8-byte aligned buffers.
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void add(uint32_t correlation, uint64_t start, uint64_t end) {
  BusyTime& b = records().by_correlation[correlation];
  b.ms += double(end - start) * 1e-6;  // ns
  b.records += 1;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(records().mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          add(k->correlationId, k->start, k->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          add(m->correlationId, m->start, m->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          add(m->correlationId, m->start, m->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
          const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
          if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) records().tag_of[x->correlationId] = x->externalId;
          break;
        }
        default: break;
      }
    }
  }
  std::free(buffer);
}

// RUNTIME and DRIVER: CUPTI writes an external-correlation record only in front of an API
// record, so the API records must be on although nothing reads them.
const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                     CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_RUNTIME,
                                     CUPTI_ACTIVITY_KIND_DRIVER,            CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

}  // namespace

CuptiTracer::CuptiTracer() {
  Records& r = records();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    HIOS_CHECK(!r.active, "CUPTI: a tracer is already active in this process");
    r.active = true;
    r.by_correlation.clear();
    r.tag_of.clear();
  }
  HIOS_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  for (CUpti_ActivityKind k : kKinds) HIOS_CUPTI_CHECK(cuptiActivityEnable(k));
}

CuptiTracer::~CuptiTracer() {
  (void)cudaDeviceSynchronize();
  (void)cuptiActivityFlushAll(1);
  for (CUpti_ActivityKind k : kKinds) (void)cuptiActivityDisable(k);
  std::lock_guard<std::mutex> lock(records().mu);
  records().active = false;
  records().by_correlation.clear();
  records().tag_of.clear();
}

void CuptiTracer::push(uint64_t tag) {
  HIOS_CUPTI_CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, tag));
}

void CuptiTracer::pop() {
  uint64_t last = 0;
  HIOS_CUPTI_CHECK(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
}

std::map<uint64_t, BusyTime> CuptiTracer::collect() {
  const cudaError_t e = cudaDeviceSynchronize();
  HIOS_CHECK(e == cudaSuccess, "CUPTI: device synchronisation failed: %s", cudaGetErrorString(e));
  HIOS_CUPTI_CHECK(cuptiActivityFlushAll(1));
  std::map<uint64_t, BusyTime> out;
  std::lock_guard<std::mutex> lock(records().mu);
  Records& r = records();
  for (const auto& [corr, busy] : r.by_correlation) {
    auto it = r.tag_of.find(corr);
    if (it == r.tag_of.end()) continue;
    BusyTime& b = out[it->second];
    b.ms += busy.ms;
    b.records += busy.records;
  }
  r.by_correlation.clear();
  r.tag_of.clear();
  return out;
}

}  // namespace hios::prof
