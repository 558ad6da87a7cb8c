// The C++ adapter end to end: an attention-like kernel takes its scratch
// through TempallocAllocator<Base> for many resets, against a reference
// computed without scratch; alignment, errors, NULL handling and stats.
//
// Built and run by `cargo test --features capi` (tests/all/capi.rs), linked
// against the crate's static library. Exits non-zero on any failure.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tempalloc.hpp"

namespace {

int failures = 0;

#define CHECK(cond)                                                     \
  do {                                                                  \
    if (!(cond)) {                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,       \
                   __LINE__, #cond);                                    \
      ++failures;                                                       \
    }                                                                   \
  } while (0)

// A stand-in for a runtime's temp allocator base class (the shape of
// ExecuTorch's MemoryAllocator): virtual allocate/reset, a constructor
// argument, and a reset counter so the test sees the override is called.
class RuntimeAllocator {
 public:
  explicit RuntimeAllocator(int tag) : tag_(tag) {}
  virtual ~RuntimeAllocator() = default;
  virtual void* allocate(size_t size, size_t alignment) = 0;
  virtual void reset() {}
  int tag() const { return tag_; }

 private:
  int tag_;
};

using Adapter = tempalloc::TempallocAllocator<RuntimeAllocator>;

bool aligned(const void* p, size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// Deterministic inputs.
float value(size_t seed, size_t i) {
  uint32_t x = static_cast<uint32_t>(seed * 2654435761u + i * 40503u + 1u);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<float>(x % 2001u) / 1000.0f - 1.0f;
}

// out[n x d] = softmax(q k^T / sqrt(d)) v with q: n x d, k, v: m x d.
// Takes its score rows and output accumulator from `temp` (the way a kernel
// takes scratch from its runtime); returns false when scratch is refused.
bool attention(RuntimeAllocator& temp, const float* q, const float* k,
               const float* v, size_t n, size_t m, size_t d, float* out) {
  auto* scores = static_cast<float*>(temp.allocate(n * m * sizeof(float), 64));
  auto* acc = static_cast<float*>(temp.allocate(d * sizeof(float), 4096));
  if (scores == nullptr || acc == nullptr) return false;
  CHECK(aligned(scores, 64));
  CHECK(aligned(acc, 4096));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (size_t i = 0; i < n; ++i) {
    float* row = scores + i * m;
    float max = -INFINITY;
    for (size_t j = 0; j < m; ++j) {
      float s = 0;
      for (size_t c = 0; c < d; ++c) s += q[i * d + c] * k[j * d + c];
      row[j] = s * scale;
      max = row[j] > max ? row[j] : max;
    }
    float sum = 0;
    for (size_t j = 0; j < m; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    for (size_t c = 0; c < d; ++c) acc[c] = 0;
    for (size_t j = 0; j < m; ++j) {
      for (size_t c = 0; c < d; ++c) acc[c] += row[j] * v[j * d + c];
    }
    for (size_t c = 0; c < d; ++c) out[i * d + c] = acc[c] / sum;
  }
  return true;
}

// The same computation with std::vector and doubles: no scratch allocator.
std::vector<float> reference(const float* q, const float* k, const float* v,
                             size_t n, size_t m, size_t d) {
  std::vector<float> out(n * d);
  std::vector<double> row(m);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (size_t i = 0; i < n; ++i) {
    double max = -INFINITY, sum = 0;
    for (size_t j = 0; j < m; ++j) {
      double s = 0;
      for (size_t c = 0; c < d; ++c) s += double(q[i * d + c]) * k[j * d + c];
      row[j] = s * scale;
      max = row[j] > max ? row[j] : max;
    }
    for (size_t j = 0; j < m; ++j) sum += row[j] = std::exp(row[j] - max);
    for (size_t c = 0; c < d; ++c) {
      double o = 0;
      for (size_t j = 0; j < m; ++j) o += row[j] * v[j * d + c];
      out[i * d + c] = static_cast<float>(o / sum);
    }
  }
  return out;
}

struct Shape {
  size_t n, m, d;
};

void test_attention_through_resets() {
  const Shape shapes[] = {{4, 16, 8}, {16, 64, 32}, {32, 200, 64}, {64, 512, 64}, {1, 1, 1}};
  tempalloc_config config = tempalloc_config_default();
  config.prefault = true;
  Adapter temp(config, 7);
  CHECK(temp.valid());
  CHECK(temp.tag() == 7);
  RuntimeAllocator& base = temp;  // the runtime only knows its base class

  struct Case {
    Shape s;
    std::vector<float> q, k, v, expected;
  };
  std::vector<Case> cases;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    Shape s = shapes[i];
    Case c{s, {}, {}, {}, {}};
    for (size_t x = 0; x < s.n * s.d; ++x) c.q.push_back(value(3 * i, x));
    for (size_t x = 0; x < s.m * s.d; ++x) c.k.push_back(value(3 * i + 1, x));
    for (size_t x = 0; x < s.m * s.d; ++x) c.v.push_back(value(3 * i + 2, x));
    c.expected = reference(c.q.data(), c.k.data(), c.v.data(), s.n, s.m, s.d);
    cases.push_back(std::move(c));
  }

  const int warmup = 2, rounds = 100;
  uint64_t system_after_warmup = 0;
  for (int round = 0; round < warmup + rounds; ++round) {
    if (round == warmup) system_after_warmup = temp.stats().system_allocations;
    for (const Case& c : cases) {
      std::vector<float> out(c.s.n * c.s.d);
      bool ok = attention(base, c.q.data(), c.k.data(), c.v.data(), c.s.n,
                          c.s.m, c.s.d, out.data());
      CHECK(ok);
      for (size_t x = 0; ok && x < out.size(); ++x) {
        if (std::fabs(out[x] - c.expected[x]) > 1e-4f) {
          std::fprintf(stderr, "round %d shape %zux%zux%zu [%zu]: %f != %f\n",
                       round, c.s.n, c.s.m, c.s.d, x, out[x], c.expected[x]);
          ++failures;
          break;
        }
      }
      base.reset();
    }
  }
  tempalloc_stats s = temp.stats();
  CHECK(s.system_allocations == system_after_warmup);
  CHECK(s.system_allocations >= 1);
  CHECK(s.resets == uint64_t(warmup + rounds) * cases.size());
  CHECK(s.allocations == 2 * s.resets);
  CHECK(s.bytes_held > 0);
  CHECK(temp.last_error() == TEMPALLOC_OK);
  std::printf("attention: %llu resets, %llu system allocations (%llu in warm-up), "
              "%zu bytes held, %zu high water\n",
              (unsigned long long)s.resets,
              (unsigned long long)s.system_allocations,
              (unsigned long long)system_after_warmup, s.bytes_held, s.high_water);

  temp.release();
  CHECK(temp.stats().bytes_held == 0);
  CHECK(temp.allocate(100, 64) != nullptr);  // usable after a release
}

void test_alignment_and_writes() {
  Adapter temp(tempalloc_config_default(), 0);
  const size_t alignments[] = {1, 8, 16, 64, 128, 4096};
  for (int round = 0; round < 3; ++round) {
    std::vector<unsigned char*> ptrs;
    for (size_t i = 0; i < 24; ++i) {
      size_t a = alignments[i % 6], size = 1 + i * 37;
      auto* p = static_cast<unsigned char*>(temp.allocate(size, a));
      CHECK(p != nullptr);
      if (p == nullptr) continue;
      CHECK(aligned(p, a));
      std::memset(p, int(i), size);
      ptrs.push_back(p);
    }
    for (size_t i = 0; i < ptrs.size(); ++i) {  // nothing overlapped
      for (size_t b = 0; b < 1 + i * 37; ++b) {
        if (ptrs[i][b] != (unsigned char)i) {
          ++failures;
          std::fprintf(stderr, "buffer %zu byte %zu overwritten\n", i, b);
          break;
        }
      }
    }
    temp.reset();
  }
  CHECK(temp.allocate(0, 64) != nullptr);  // zero-sized: non-NULL, not read
}

void test_errors() {
  Adapter temp(tempalloc_config_default(), 0);
  CHECK(temp.allocate(64, 3) == nullptr);
  CHECK(temp.last_error() == TEMPALLOC_ERROR_INVALID_ALIGNMENT);
  CHECK(std::strstr(temp.last_error_message(), "alignment") != nullptr);
  temp.clear_error();
  CHECK(temp.allocate(64, 0) == nullptr);
  CHECK(temp.last_error() == TEMPALLOC_ERROR_INVALID_ALIGNMENT);
  CHECK(temp.allocate(SIZE_MAX - 10, 64) == nullptr);
  CHECK(temp.last_error() == TEMPALLOC_ERROR_SIZE_OVERFLOW);
  CHECK(temp.allocate(64, 64) != nullptr);  // fine after the errors

  // A hard limit: 1 MiB. A 4 MiB request is refused, smaller ones work.
  tempalloc_config limited = tempalloc_config_default();
  limited.max_bytes = 1 << 20;
  Adapter small(limited, 0);
  CHECK(small.allocate(4 << 20, 64) == nullptr);
  CHECK(small.last_error() == TEMPALLOC_ERROR_BUDGET_EXCEEDED);
  // The numbers survive the C boundary.
  tempalloc_error_detail detail = small.last_error_detail();
  CHECK(detail.code == TEMPALLOC_ERROR_BUDGET_EXCEEDED);
  CHECK(detail.requested == (4u << 20) && detail.limit == (1u << 20));
  CHECK(detail.held <= detail.limit);
  std::string text = small.last_error_description();
  CHECK(text.find("4194304 bytes requested") != std::string::npos);
  CHECK(text.find("limit is 1048576 bytes") != std::string::npos);
  CHECK(small.allocate(1000, 64) != nullptr);
  CHECK(small.last_error_detail().requested == (4u << 20));  // kept until cleared
  small.clear_error();
  CHECK(small.last_error_detail().code == TEMPALLOC_OK);
  CHECK(small.last_error_description() == "success");

  // Errors are per object.
  Adapter other(tempalloc_config_default(), 0);
  CHECK(other.last_error() == TEMPALLOC_OK);

  // NULL handles: error codes, never a crash.
  tempalloc_error error = TEMPALLOC_OK;
  CHECK(tempalloc_allocate(nullptr, 16, 16, &error) == nullptr);
  CHECK(error == TEMPALLOC_ERROR_NULL_ARGUMENT);
  CHECK(tempalloc_allocate(nullptr, 16, 16, nullptr) == nullptr);
  CHECK(tempalloc_reset(nullptr) == TEMPALLOC_ERROR_NULL_ARGUMENT);
  CHECK(tempalloc_release(nullptr) == TEMPALLOC_ERROR_NULL_ARGUMENT);
  tempalloc_stats s{};
  CHECK(tempalloc_allocator_stats(nullptr, &s) == TEMPALLOC_ERROR_NULL_ARGUMENT);
  CHECK(tempalloc_allocator_stats(temp.handle(), nullptr) ==
        TEMPALLOC_ERROR_NULL_ARGUMENT);
  CHECK(tempalloc_block_cache_evict_idle(nullptr, 0, &error) == 0);
  CHECK(error == TEMPALLOC_ERROR_NULL_ARGUMENT);
  tempalloc_allocator_destroy(nullptr);
  tempalloc_block_cache_destroy(nullptr);

  // An adapter over a NULL cache has no allocator, and says so.
  Adapter orphan(static_cast<const tempalloc_block_cache*>(nullptr),
                 tempalloc_config_default(), 0);
  CHECK(!orphan.valid());
  CHECK(orphan.last_error() == TEMPALLOC_ERROR_NULL_ARGUMENT);
  orphan.clear_error();
  CHECK(orphan.allocate(16, 16) == nullptr);
  CHECK(orphan.last_error() == TEMPALLOC_ERROR_NULL_ARGUMENT);
  orphan.reset();  // harmless

  for (tempalloc_error code = TEMPALLOC_OK; code <= TEMPALLOC_ERROR_CHECKPOINT_CLOSED; ++code) {
    CHECK(tempalloc_error_message(code) != nullptr);
    CHECK(std::strcmp(tempalloc_error_message(code), "unknown tempalloc error code") != 0);
  }
  CHECK(std::strcmp(tempalloc_error_message(-5), "unknown tempalloc error code") == 0);
}

void test_shared_cache() {
  tempalloc_error error = TEMPALLOC_ERROR_INTERNAL;
  tempalloc_block_cache* cache = tempalloc_block_cache_create(64 << 20, 0, &error);
  CHECK(cache != nullptr);
  CHECK(error == TEMPALLOC_OK);
  {
    Adapter a(cache, tempalloc_config_default(), 1);
    CHECK(a.allocate(200000, 64) != nullptr);
    a.release();  // a's block goes back to the cache, idle
    CHECK(tempalloc_block_cache_idle_bytes(cache, &error) >= 200000);
    Adapter b(cache, tempalloc_config_default(), 2);
    CHECK(b.allocate(200000, 64) != nullptr);  // served from a's block
    tempalloc_stats s{};
    CHECK(tempalloc_block_cache_stats(cache, &s) == TEMPALLOC_OK);
    CHECK(s.system_allocations == 1);
    CHECK(s.cache_hits == 1);
    b.release();
  }
  CHECK(tempalloc_block_cache_evict_idle(cache, 0, &error) >= 200000);
  CHECK(error == TEMPALLOC_OK);
  CHECK(tempalloc_block_cache_idle_bytes(cache, nullptr) == 0);

  // A hard limit on the shared cache applies to its allocators.
  tempalloc_block_cache* limited = tempalloc_block_cache_create(0, 1 << 20, nullptr);
  Adapter c(limited, tempalloc_config_default(), 3);
  tempalloc_block_cache_destroy(limited);  // c keeps the cache alive
  CHECK(c.allocate(4 << 20, 64) == nullptr);
  CHECK(c.last_error() == TEMPALLOC_ERROR_BUDGET_EXCEEDED);
  CHECK(c.allocate(4096, 4096) != nullptr);
  tempalloc_block_cache_destroy(cache);
}

void test_checkpoints() {
  // Per-kernel recycling inside an inference through the adapter.
  Adapter temp(tempalloc_config_default(), 4);
  unsigned char* act = static_cast<unsigned char*>(temp.allocate(256, 64));
  CHECK(act != nullptr);
  std::memset(act, 7, 256);
  void* first = nullptr;
  for (int kernel = 0; kernel < 3; ++kernel) {
    tempalloc_checkpoint_token cp = temp.checkpoint();
    void* tile = temp.allocate(4096, 64);
    CHECK(tile != nullptr);
    if (first == nullptr) first = tile;
    CHECK(tile == first);
    std::memset(tile, 1, 4096);
    CHECK(temp.rewind(cp));
    CHECK(!temp.rewind(cp));
    CHECK(temp.last_error() == TEMPALLOC_ERROR_CHECKPOINT_CLOSED);
    temp.clear_error();
  }
  CHECK(act[0] == 7 && act[255] == 7);
  CHECK(temp.check() == TEMPALLOC_OK);
}

// ExecuTorch's MemoryAllocator shape: a default
// alignment on allocate() taken from the class, and non-virtual size() and
// base_address() describing the buffer given to the constructor.
class EtShapedAllocator {
 public:
  static constexpr size_t kDefaultAlignment = 32;
  EtShapedAllocator(uint32_t size, uint8_t* base_address)
      : base_address_(base_address), size_(size) {}
  virtual ~EtShapedAllocator() = default;
  virtual void* allocate(size_t size, size_t alignment = kDefaultAlignment) {
    (void)size;
    (void)alignment;
    return nullptr;  // the real one bumps in its buffer; never called here
  }
  virtual void reset() {}
  uint8_t* base_address() const { return base_address_; }
  uint32_t size() const { return size_; }
  template <typename T>
  T* allocateList(size_t n, size_t alignment = alignof(T)) {
    return static_cast<T*>(allocate(n * sizeof(T), alignment));
  }

 private:
  uint8_t* base_address_;
  uint32_t size_;
};

void test_executorch_shape() {
  tempalloc::TempallocAllocator<EtShapedAllocator> temp(tempalloc_config_default(), 0,
                                                         nullptr);
  static_assert(decltype(temp)::kDefaultAlignment == 32, "Base's default alignment");
  static_assert(Adapter::kDefaultAlignment == alignof(void*),
                "alignof(void*) for a base without one");
  EtShapedAllocator& base = temp;
  // The default argument, through the adapter and through the base.
  for (int i = 0; i < 100; ++i) {
    void* p = temp.allocate(24);
    void* q = base.allocate(40);
    CHECK(p != nullptr && q != nullptr);
    CHECK(aligned(p, 32) && aligned(q, 32));
  }
  // The base's own helpers reach tempalloc through the virtual call.
  double* list = base.allocateList<double>(16);
  CHECK(list != nullptr && aligned(list, alignof(double)));
  // size() and base_address() are the base's: what its constructor got.
  CHECK(base.size() == 0 && base.base_address() == nullptr);
  CHECK(temp.stats().bytes_live >= 100 * (24 + 40) + 16 * sizeof(double));
  base.reset();
  CHECK(temp.stats().bytes_live == 0);
}

}  // namespace

int main() {
  // The header and the library linked are one version.
  CHECK(tempalloc_version() == TEMPALLOC_VERSION);
  CHECK(TEMPALLOC_VERSION == TEMPALLOC_VERSION_MAJOR * 10000 +
                                 TEMPALLOC_VERSION_MINOR * 100 +
                                 TEMPALLOC_VERSION_PATCH);
  test_executorch_shape();
  test_attention_through_resets();
  test_alignment_and_writes();
  test_errors();
  test_shared_cache();
  test_checkpoints();
  if (failures != 0) {
    std::fprintf(stderr, "adapter_test: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("adapter_test: all checks passed\n");
  return 0;
}
