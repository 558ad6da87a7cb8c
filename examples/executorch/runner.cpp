// Executes ExecuTorch programs (.pte) through the released executorch 1.5.1
// runtime and kernels, with each of three temp allocators in a child
// process of its own, checks that their outputs are identical, and prints
// per execute: time, temp requests, resets, system allocations, page
// faults, the bytes the temp allocator held, and peak RSS.
//
//   et_runner --et-so SO --et-stubs DIR [--et-sdpa SO] [--repeat N] [--rounds R] [--per-call]
//             [--threads N] [--ios-malloc] [--prewarm] PROGRAM.pte...
//
// --repeat N: executes per child (default 100); --rounds R: children per
// allocator, the allocators' order rotated each round, medians reported
// (default 3); --per-call: what each kernel call asked of the temp
// allocator and of the system, from the first execute with tempalloc.
// --et-sdpa SO: also load the wheel's LLM custom-ops library (llama::
// custom_sdpa.out and friends), after its stand-ins (gen_standins.py).
// --threads N: ExecuTorch's threadpool at N threads (default: its own,
// one per core); the SDPA kernels' temp requests scale with it.
// --prewarm: a fourth row, "prewarmed": tempalloc with prefault on, which
// before the first execute takes and resets once the largest window's
// bytes recorded by a tempalloc child of the same program (the C API has
// no Plan: this is the main-thread part of one).
// --ios-malloc: in the malloc and et-caching children only, glibc's
// malloc returns blocks of 128 KiB and up to the system when they are
// freed (a fixed M_MMAP_THRESHOLD and M_TRIM_THRESHOLD), as iOS's does
// (docs/benchmarks.md says what this models and what not).
//
// build.sh builds and runs it (docs/benchmarks.md, "ExecuTorch programs").
// It follows ExecuTorch's executor_runner: a BufferDataLoader over the
// .pte, a MemoryManager with a method allocator, the planned buffers and
// the temp allocator under test, and Method::execute. Exit status 1 when a
// child fails, the outputs differ, the libraries logged an error, or
// tempalloc made a system allocation after the first execute.
#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <executorch/extension/data_loader/buffer_data_loader.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include "allocators.hpp"
#include "hooks.hpp"

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::extension::BufferDataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Program;
using executorch::runtime::Span;

namespace {

const char* const kAllocators[] = {"tempalloc", "malloc", "et-caching", "prewarmed"};
// ExecuTorch's LLM runner caps its CPUCachingAllocator at 10 MiB.
const uint32_t kEtCachingCap = 10u << 20;

struct Options {
  std::string et_so, et_stubs, et_sdpa;
  int threads = 0;  // 0: the threadpool's default
  bool prewarm = false;  // a fourth row, tempalloc prewarmed
  uint64_t prewarm_bytes = 0;  // in a prewarmed child: the plan
  bool ios_malloc = false;
  int repeat = 100;  // executes per child
  int rounds = 3;    // children per allocator, in rotated order
  bool per_call = false;
  std::vector<std::string> programs;
  std::string child;  // the allocator, in a child
};

[[noreturn]] void die(const std::string& message) {
  fprintf(stderr, "et_runner: error: %s\n", message.c_str());
  exit(1);
}

// ---- ExecuTorch's log, counted: the libraries log errors and carry on.

int g_logged_errors = 0;

void emit_log(et_timestamp_t, et_pal_log_level_t level, const char* file, const char*, size_t line,
              const char* message, size_t length) {
  if (level == kError || level == kFatal) g_logged_errors++;
  fprintf(stderr, "%c executorch:%s:%zu] %.*s\n", static_cast<char>(level), file, line, static_cast<int>(length),
          message);
}

// ---- Loading the released CPUCachingAllocator.

struct EtCachingSymbols {
  et_runner::EtCaching::Ctor ctor;
  et_runner::EtCaching::Dtor dtor;
};

// The extension links PyTorch and Python libraries it never calls on this
// path; CMakeLists.txt builds empty stand-ins (with the data symbols it binds at
// load) under their sonames, loaded here first so they satisfy its NEEDED.
// Every child loads it, whichever allocator it runs, so the three
// processes map the same code and their RSS compares.
EtCachingSymbols load_et_caching(const Options& o) {
  for (const char* name :
       {"libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so", "_C.cpython-311-x86_64-linux-gnu.so"}) {
    std::string path = o.et_stubs + "/" + name;
    if (!dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) die(std::string("dlopen: ") + dlerror());
  }
  void* h = dlopen(o.et_so.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (!h) die(std::string("dlopen: ") + dlerror());
  if (!o.et_sdpa.empty()) {
    // The stand-ins global first, so the library's registration binds to
    // their no-ops; its EXECUTORCH_LIBRARY initialisers then register the
    // llama:: kernels with the runtime.
    std::string standins = o.et_stubs + "/libet_sdpa_standins.so";
    if (!dlopen(standins.c_str(), RTLD_NOW | RTLD_GLOBAL)) die(std::string("dlopen: ") + dlerror());
    if (!dlopen(o.et_sdpa.c_str(), RTLD_NOW | RTLD_LOCAL)) die(std::string("dlopen: ") + dlerror());
  }
  auto ctor = reinterpret_cast<et_runner::EtCaching::Ctor>(
      dlsym(h, "_ZN10executorch9extension19CPUCachingAllocatorC1Ej"));
  auto dtor = reinterpret_cast<et_runner::EtCaching::Dtor>(
      dlsym(h, "_ZN10executorch9extension19CPUCachingAllocatorD1Ev"));
  if (!ctor || !dtor) die("CPUCachingAllocator's constructor or destructor not found in " + o.et_so);
  return {ctor, dtor};
}

// ---- Process figures.

uint64_t minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_minflt);
}

// A field of /proc/self/status in bytes (VmRSS, VmHWM).
size_t status_bytes(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t n = strlen(field);
  while (std::getline(f, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return std::stoull(line.substr(n + 1)) * 1024;
    }
  }
  return 0;
}

// ---- The child: one allocator, one program.

// What Counted's hooks write to (plain functions, so globals).
et_runner::TempAllocator* g_temp = nullptr;
size_t g_peak_held = 0;
// Held bytes are sampled before every reset of the first executes only:
// they reach their peak there, and tempalloc's stats call stays out of the
// timed executes after.
bool g_sample_held = true;
const int kSampledExecutes = 3;

// The per-call survey: what each reset window (one kernel call) did, in
// the first execute and in the second (the steady state).
struct Window {
  uint64_t requests = 0, bytes = 0;
  uint64_t other_allocations = 0;  // system allocations outside the temp allocator
  uint64_t ns = 0;
};
std::vector<Window>* g_windows = nullptr;  // the execute being recorded, if any
// Bytes of the current window's requests, each rounded up to 64 (the
// SDPA kernels' alignment), and the most of any window: the plan.
uint64_t g_window_bytes = 0, g_peak_window_bytes = 0;
uint64_t g_window_start = 0;
std::chrono::steady_clock::time_point g_window_t0;

uint64_t other_allocations() { return hooks::system_allocations() - hooks::temp_system_allocations(); }

void before_reset() {
  g_peak_window_bytes = std::max(g_peak_window_bytes, g_window_bytes);
  g_window_bytes = 0;
  if (g_sample_held) {
    size_t held = static_cast<size_t>(std::max<int64_t>(hooks::temp_heap_bytes(), 0)) + g_temp->mapped_bytes();
    g_peak_held = std::max(g_peak_held, held);
  }
  if (g_windows != nullptr) {
    uint64_t now = other_allocations();
    g_windows->back().other_allocations = now - g_window_start;
    g_window_start = now;
    auto t = std::chrono::steady_clock::now();
    g_windows->back().ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t - g_window_t0).count());
    g_window_t0 = t;
    g_windows->emplace_back();  // reserved: not a system allocation
  }
}

void on_request(size_t size) {
  g_window_bytes += (size + 63) / 64 * 64;
  if (g_windows != nullptr) {
    g_windows->back().requests++;
    g_windows->back().bytes += size;
  }
}

std::unique_ptr<et_runner::TempAllocator> make_allocator(const std::string& name, const EtCachingSymbols& et) {
  if (name == "tempalloc" || name == "prewarmed") {
    tempalloc_config config = tempalloc_config_default();
    if (name == "prewarmed") config.prefault = 1;
    auto t = std::make_unique<et_runner::Tempalloc>(config);
    if (!t->valid()) die(std::string("tempalloc: ") + t->error());
    return t;
  }
  if (name == "malloc") return std::make_unique<et_runner::Malloc>();
  if (name == "et-caching") return std::make_unique<et_runner::EtCaching>(et.ctor, et.dtor, kEtCachingCap);
  die("unknown allocator " + name);
}

// The .pte in a 16-byte aligned buffer, as BufferDataLoader needs.
std::vector<max_align_t> read_file(const std::string& path, size_t* size) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) die("cannot read " + path);
  *size = static_cast<size_t>(f.tellg());
  std::vector<max_align_t> buf((*size + sizeof(max_align_t) - 1) / sizeof(max_align_t));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(*size));
  return buf;
}

// Distinct values (no ties, so topk's order is defined): element i of n
// is the i-th of a permutation of 0..n, spread over [-4, 4).
void fill_distinct(float* x, size_t n) {
  size_t stride = 7919;
  while (std::__gcd(stride, n) != 1) stride += 2;
  for (size_t i = 0; i < n; i++) x[i] = static_cast<float>((i * stride) % n) * 8.0f / static_cast<float>(n) - 4.0f;
}

// Int8 inputs (quantized SDPA): the same permutation, folded into
// [-64, 64) so products stay far from overflow.
void fill_int8(int8_t* x, size_t n) {
  size_t stride = 7919;
  while (std::__gcd(stride, n) != 1) stride += 2;
  for (size_t i = 0; i < n; i++) x[i] = static_cast<int8_t>(static_cast<int>((i * stride) % n % 128) - 64);
}

// An input tensor of the method's shape with distinct values; owns its storage.
struct Input {
  std::vector<float> data;  // float elements, or the int8 bytes
  std::vector<executorch::aten::SizesType> sizes;
  std::vector<executorch::aten::DimOrderType> dim_order;
  std::vector<executorch::aten::StridesType> strides;
  std::unique_ptr<TensorImpl> impl;
};

std::vector<Input> make_inputs(const MethodMeta& meta) {
  std::vector<Input> inputs(meta.num_inputs());
  for (size_t i = 0; i < inputs.size(); i++) {
    auto info = meta.input_tensor_meta(i);
    if (!info.ok()) die("input " + std::to_string(i) + " is not a tensor");
    ScalarType type = info->scalar_type();
    if (type != ScalarType::Float && type != ScalarType::Char) die("input " + std::to_string(i) + " is not float or int8");
    Input& in = inputs[i];
    in.sizes.assign(info->sizes().begin(), info->sizes().end());
    in.dim_order.assign(info->dim_order().begin(), info->dim_order().end());
    in.strides.assign(in.sizes.size(), 1);
    for (size_t d = in.sizes.size(); d-- > 1;) in.strides[d - 1] = in.strides[d] * in.sizes[d];
    in.data.resize((info->nbytes() + sizeof(float) - 1) / sizeof(float));
    if (type == ScalarType::Float) fill_distinct(in.data.data(), in.data.size());
    else fill_int8(reinterpret_cast<int8_t*>(in.data.data()), info->nbytes());
    in.impl = std::make_unique<TensorImpl>(type, static_cast<ssize_t>(in.sizes.size()), in.sizes.data(),
                                           in.data.data(), in.dim_order.data(), in.strides.data());
  }
  return inputs;
}

std::string hex(const void* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  auto b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; i++) {
    s[2 * i] = digits[b[i] >> 4];
    s[2 * i + 1] = digits[b[i] & 15];
  }
  return s;
}

uint64_t median(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The wheel has no threadpool header: its exported functions by name
// (member functions take `this` first).
void set_threads(int n) {
  using Get = void* (*)();
  using Reset = bool (*)(void*, unsigned);
  using Count = size_t (*)(const void*);
  auto get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "_ZN10executorch9extension10threadpool14get_threadpoolEv"));
  auto reset = reinterpret_cast<Reset>(
      dlsym(RTLD_DEFAULT, "_ZN10executorch9extension10threadpool10ThreadPool24_unsafe_reset_threadpoolEj"));
  auto count = reinterpret_cast<Count>(
      dlsym(RTLD_DEFAULT, "_ZNK10executorch9extension10threadpool10ThreadPool16get_thread_countEv"));
  if (!get || !reset || !count) die("the threadpool's functions are not in the process");
  void* pool = get();
  if (!pool || !reset(pool, static_cast<unsigned>(n)) || count(pool) != static_cast<size_t>(n)) {
    die("could not set the threadpool to " + std::to_string(n) + " threads");
  }
}

int child(const Options& o, const std::string& pte) {
  if (o.ios_malloc && o.child != "tempalloc") {
    // Fixed thresholds also stop glibc from raising them after a free,
    // which is what normally keeps it from unmapping a block it reuses.
    if (mallopt(M_MMAP_THRESHOLD, 128 << 10) != 1 || mallopt(M_TRIM_THRESHOLD, 128 << 10) != 1) die("mallopt");
  }
  EtCachingSymbols et = load_et_caching(o);
  if (o.threads > 0) set_threads(o.threads);
  auto temp = make_allocator(o.child, et);
  g_temp = temp.get();
  et_runner::Counted counted(temp->get());
  counted.before_reset_ = before_reset;
  counted.on_request_ = on_request;

  size_t size = 0;
  auto file = read_file(pte, &size);
  BufferDataLoader loader(file.data(), size);
  auto program = Program::load(&loader);
  if (!program.ok()) die(pte + ": Program::load failed");
  auto meta = program->method_meta("forward");
  if (!meta.ok()) die(pte + ": no method forward");

  // The method's own allocations (values, kernels) from a fixed pool.
  static uint8_t method_pool[1 << 20];
  MemoryAllocator method_allocator(sizeof method_pool, method_pool);
  std::vector<std::unique_ptr<uint8_t[]>> planned;
  std::vector<Span<uint8_t>> spans;
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); i++) {
    size_t n = static_cast<size_t>(meta->memory_planned_buffer_size(i).get());
    planned.emplace_back(new uint8_t[n]);
    spans.emplace_back(planned.back().get(), n);
  }
  HierarchicalAllocator planned_memory({spans.data(), spans.size()});
  MemoryManager memory(&method_allocator, &planned_memory, &counted);
  auto method = program->load_method("forward", &memory);
  if (!method.ok()) die(pte + ": load_method failed");
  if (o.prewarm_bytes > 0) {
    // The plan, before the first execute: reservation, commit and page
    // faults happen here.
    hooks::InTemp in;
    if (!temp->get()->allocate(o.prewarm_bytes, 64)) die("prewarm: tempalloc refused " + std::to_string(o.prewarm_bytes));
    temp->get()->reset();
  }
  auto inputs = make_inputs(*meta);
  for (size_t i = 0; i < inputs.size(); i++) {
    if (method->set_input(EValue(Tensor(inputs[i].impl.get())), i) != Error::Ok) die(pte + ": set_input failed");
  }

  // Per execute: time, system allocations by the temp allocator and by
  // the rest (kernels, runtime), minor page faults.
  size_t rss_before = status_bytes("VmRSS");
  std::vector<uint64_t> ns, temp_sys, other_sys, faults;
  std::vector<Window> windows[2];
  for (auto& w : windows) {
    w.reserve(4096);
    w.emplace_back();
  }
  et_runner::TempCounts first{};
  for (int r = 0; r < o.repeat; r++) {
    g_windows = o.per_call && r < 2 ? &windows[r] : nullptr;
    g_sample_held = r < kSampledExecutes;
    g_window_start = other_allocations();
    g_window_t0 = std::chrono::steady_clock::now();
    uint64_t t0s = hooks::temp_system_allocations(), o0 = other_allocations(), f0 = minor_faults();
    auto t0 = std::chrono::steady_clock::now();
    Error e = method->execute();
    auto t1 = std::chrono::steady_clock::now();
    uint64_t t1s = hooks::temp_system_allocations(), o1 = other_allocations(), f1 = minor_faults();
    if (e != Error::Ok) die(pte + ": execute failed with error " + std::to_string(static_cast<int>(e)));
    ns.push_back(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    temp_sys.push_back(t1s - t0s);
    other_sys.push_back(o1 - o0);
    faults.push_back(f1 - f0);
    if (r == 0) first = counted.counts();
  }
  g_windows = nullptr;
  et_runner::TempCounts all = counted.counts();
  if (all.requests != first.requests * static_cast<uint64_t>(o.repeat) ||
      all.resets != first.resets * static_cast<uint64_t>(o.repeat)) {
    die(pte + ": the executes made different numbers of temp requests or resets");
  }
  auto later = [](const std::vector<uint64_t>& v) { return std::vector<uint64_t>(v.begin() + 1, v.end()); };
  auto sum = [](const std::vector<uint64_t>& v) {
    uint64_t t = 0;
    for (auto x : v) t += x;
    return t;
  };
  std::vector<std::pair<const char*, uint64_t>> report = {
      {"requests", first.requests},
      {"bytes", first.bytes},
      {"resets", first.resets},
      {"first_ns", ns[0]},
      {"median_ns", median(later(ns))},
      {"alloc_ns", (all.nanos - first.nanos) / static_cast<uint64_t>(o.repeat - 1)},
      {"first_alloc_ns", first.nanos},
      {"first_temp_sys", temp_sys[0]},
      {"later_temp_sys", sum(later(temp_sys))},
      {"first_other_sys", other_sys[0]},
      {"later_other_sys", sum(later(other_sys))},
      {"first_faults", faults[0]},
      {"later_faults", sum(later(faults))},
      {"held", g_peak_held},
      {"plan", g_peak_window_bytes},
      {"hwm", status_bytes("VmHWM")},
      {"rss_before", rss_before},
  };
  printf("report");
  for (const auto& kv : report) printf(" %s=%llu", kv.first, static_cast<unsigned long long>(kv.second));
  printf("\n");
  if (o.per_call) {
    for (size_t w = 0; w + 1 < windows[0].size() && w + 1 < windows[1].size(); w++) {
      printf("window %llu %llu %llu %llu %llu\n", static_cast<unsigned long long>(windows[0][w].requests),
             static_cast<unsigned long long>(windows[0][w].bytes),
             static_cast<unsigned long long>(windows[0][w].other_allocations),
             static_cast<unsigned long long>(windows[1][w].other_allocations),
             static_cast<unsigned long long>(windows[1][w].ns));
    }
  }
  for (size_t i = 0; i < method->outputs_size(); i++) {
    const EValue& v = method->get_output(i);
    if (!v.isTensor()) die(pte + ": output " + std::to_string(i) + " is not a tensor");
    const Tensor& t = v.toTensor();
    printf("output %zu %s\n", i, hex(t.const_data_ptr(), t.nbytes()).c_str());
  }
  fflush(stdout);
  if (g_logged_errors > 0) die(std::to_string(g_logged_errors) + " errors logged by ExecuTorch");
  return 0;
}

// ---- The parent: a child per allocator, program and round, then the table.

struct ChildResult {
  std::map<std::string, uint64_t> report;
  // requests, bytes, other system allocations in the first and second execute
  std::vector<std::array<uint64_t, 4>> windows;
  std::vector<std::string> outputs;              // hex, one per output tensor
};

ChildResult run_child(const Options& o, const char* allocator, const std::string& pte, uint64_t plan = 0) {
  int fds[2];
  if (pipe(fds) != 0) die("pipe");
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    // A fresh process image: nothing of the parent's heap or page tables.
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::string repeat = std::to_string(o.repeat);
    std::string threads = std::to_string(o.threads);
    std::vector<const char*> args = {"et_runner", "--child",  allocator,          "--et-so", o.et_so.c_str(),
                                     "--et-stubs", o.et_stubs.c_str(), "--repeat", repeat.c_str(),
                                     "--threads", threads.c_str()};
    if (o.per_call) args.push_back("--per-call");
    if (o.ios_malloc) args.push_back("--ios-malloc");
    std::string plan_arg = std::to_string(plan);
    if (plan > 0) {
      args.push_back("--prewarm-bytes");
      args.push_back(plan_arg.c_str());
    }
    if (!o.et_sdpa.empty()) {
      args.push_back("--et-sdpa");
      args.push_back(o.et_sdpa.c_str());
    }
    args.push_back(pte.c_str());
    args.push_back(nullptr);
    execv("/proc/self/exe", const_cast<char* const*>(args.data()));
    perror("execv");
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[65536];
  ssize_t k;
  while ((k = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(k));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die(std::string(allocator) + " on " + pte + " failed");
  ChildResult r;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "report") {
      std::string kv;
      while (words >> kv) {
        auto eq = kv.find('=');
        r.report[kv.substr(0, eq)] = std::stoull(kv.substr(eq + 1));
      }
    } else if (kind == "window") {
      std::array<uint64_t, 4> w{};
      words >> w[0] >> w[1] >> w[2] >> w[3];
      r.windows.push_back(w);
    } else if (kind == "output") {
      size_t i;
      std::string h;
      words >> i >> h;
      r.outputs.push_back(h);
    }
  }
  if (r.report.empty()) die(std::string(allocator) + " on " + pte + " printed no report");
  return r;
}

// One op name per instruction, from NAME.ops next to NAME.pte (build.sh
// writes it from the JSON), for the per-call survey.
std::vector<std::string> op_names(const std::string& pte) {
  std::ifstream f(pte.substr(0, pte.size() - 4) + ".ops");
  std::vector<std::string> names;
  std::string line;
  while (std::getline(f, line)) names.push_back(line);
  return names;
}

double kib(uint64_t bytes) { return static_cast<double>(bytes) / 1024; }
double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Each key's median over the rounds (counts are the same in every round).
std::map<std::string, uint64_t> medians(const std::vector<ChildResult>& rounds) {
  std::map<std::string, uint64_t> m;
  for (const auto& kv : rounds[0].report) {
    std::vector<uint64_t> v;
    for (const auto& r : rounds) v.push_back(r.report.at(kv.first));
    m[kv.first] = median(v);
  }
  return m;
}

// Runs one program with every allocator, `o.rounds` times in rotated
// order; prints its table; returns false when a check fails.
bool compare(const Options& o, const std::string& pte) {
  const size_t n = std::size(kAllocators) - (o.prewarm ? 0 : 1);
  std::vector<std::vector<ChildResult>> runs(n);
  for (int round = 0; round < o.rounds; round++) {
    for (size_t k = 0; k < n; k++) {
      size_t a = (k + static_cast<size_t>(round)) % n;
      // The prewarmed row's plan: what round 0's tempalloc child (run first) recorded.
      uint64_t plan = a == 3 ? runs[0].at(0).report.at("plan") : 0;
      runs[a].push_back(run_child(o, kAllocators[a], pte, plan));
    }
  }
  bool ok = true;
  auto fail = [&](const std::string& message) {
    fprintf(stderr, "et_runner: error: %s\n", message.c_str());
    ok = false;
  };
  std::string name = pte.substr(pte.find_last_of('/') + 1);
  std::vector<std::map<std::string, uint64_t>> m;
  for (const auto& r : runs) m.push_back(medians(r));
  const auto& t = m[0];
  double later = static_cast<double>(o.repeat - 1);
  printf("%s: %llu temp requests (%llu B) and %llu resets per execute; %d executes per child, median of %d rounds%s%s\n",
         name.c_str(), (unsigned long long)t.at("requests"), (unsigned long long)t.at("bytes"),
         (unsigned long long)t.at("resets"), o.repeat, o.rounds,
         o.threads > 0 ? ("; " + std::to_string(o.threads) + " threads").c_str() : "",
         o.ios_malloc ? "; iOS-like malloc" : "");
  printf("  %-10s %9s %7s %9s %8s %8s %11s %9s %12s %8s %8s %8s\n", "allocator", "us/exec", "vs", "first us",
         "alloc us", "alloc us", "temp sys", "other sys", "faults", "held", "peak RSS", "RSS grow");
  printf("  %-10s %9s %7s %9s %8s %8s %11s %9s %12s %8s %8s %8s\n", "", "(median)", "tempall.", "", "/exec", "first",
         "first/later", "/exec", "first/later", "KiB", "MiB", "KiB");
  for (size_t a = 0; a < n; a++) {
    const auto& r = m[a];
    char temp_sys[32], faults[32];
    snprintf(temp_sys, sizeof temp_sys, "%llu/%.2f", (unsigned long long)r.at("first_temp_sys"),
             static_cast<double>(r.at("later_temp_sys")) / later);
    snprintf(faults, sizeof faults, "%llu/%.2f", (unsigned long long)r.at("first_faults"),
             static_cast<double>(r.at("later_faults")) / later);
    printf("  %-10s %9.1f %6.2fx %9.1f %8.2f %8.2f %11s %9.2f %12s %8.2f %8.2f %8.2f\n", kAllocators[a],
           static_cast<double>(r.at("median_ns")) / 1e3,
           static_cast<double>(r.at("median_ns")) / static_cast<double>(t.at("median_ns")),
           static_cast<double>(r.at("first_ns")) / 1e3, static_cast<double>(r.at("alloc_ns")) / 1e3,
           static_cast<double>(r.at("first_alloc_ns")) / 1e3, temp_sys,
           static_cast<double>(r.at("later_other_sys")) / later, faults, kib(r.at("held")), mib(r.at("hwm")),
           kib(r.at("hwm") - std::min(r.at("hwm"), r.at("rss_before"))));
    for (const char* k : {"requests", "bytes", "resets"}) {
      for (const auto& run : runs[a]) {
        if (run.report.at(k) != t.at(k)) {
          fail(name + ": " + kAllocators[a] + " made " + std::to_string(run.report.at(k)) + " " + k +
               " per execute, tempalloc " + std::to_string(t.at(k)));
        }
      }
    }
    for (const auto& run : runs[a]) {
      for (size_t i = 0; i < run.outputs.size() || i < runs[0][0].outputs.size(); i++) {
        if (i >= run.outputs.size() || i >= runs[0][0].outputs.size() || run.outputs[i] != runs[0][0].outputs[i]) {
          fail(name + ": output " + std::to_string(i) + " with " + kAllocators[a] + " differs from tempalloc's");
          break;
        }
      }
    }
  }
  for (size_t a = 3; a < n; a++) {
    for (const auto& run : runs[a]) {
      if (run.report.at("first_temp_sys") != 0) {
        fail(name + ": prewarmed tempalloc made " + std::to_string(run.report.at("first_temp_sys")) +
             " system allocations in the first execute");
      }
    }
  }
  for (const auto& run : runs[0]) {
    if (run.report.at("later_temp_sys") != 0) {
      fail(name + ": tempalloc made " + std::to_string(run.report.at("later_temp_sys")) +
           " system allocations after the first execute");
    }
  }
  if (o.per_call) {
    auto names = op_names(pte);
    printf("  per kernel call, tempalloc: temp requests and bytes; system allocations outside the temp\n"
           "  allocator in the first and the second execute\n");
    const auto& w = runs[0][0].windows;
    for (size_t i = 0; i < w.size(); i++) {
      // The runtime resets at the start of execute and after every kernel call.
      std::string label = i == 0 ? "(start of execute)" : i - 1 < names.size() ? names[i - 1] : "?";
      printf("    %-34s %3llu %10llu %5llu %5llu\n", label.c_str(), (unsigned long long)w[i][0],
             (unsigned long long)w[i][1], (unsigned long long)w[i][2], (unsigned long long)w[i][3]);
    }
  }
  printf("  outputs: %zu tensors, %s in all %d runs\n\n", runs[0][0].outputs.size(),
         ok ? "identical" : "NOT identical or a check failed", o.rounds * static_cast<int>(n));
  return ok;
}

int parent(const Options& o) {
  bool ok = true;
  for (const auto& pte : o.programs) ok = compare(o, pte) && ok;
  return ok ? 0 : 1;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--et-so") o.et_so = value();
    else if (a == "--et-stubs") o.et_stubs = value();
    else if (a == "--repeat") o.repeat = std::max(2, atoi(value().c_str()));
    else if (a == "--rounds") o.rounds = std::max(1, atoi(value().c_str()));
    else if (a == "--per-call") o.per_call = true;
    else if (a == "--et-sdpa") o.et_sdpa = value();
    else if (a == "--threads") o.threads = std::max(0, atoi(value().c_str()));
    else if (a == "--ios-malloc") o.ios_malloc = true;
    else if (a == "--prewarm") o.prewarm = true;
    else if (a == "--prewarm-bytes") o.prewarm_bytes = std::stoull(value());
    else if (a == "--child") o.child = value();
    else if (a.size() > 4 && a.compare(a.size() - 4, 4, ".pte") == 0) o.programs.push_back(a);
    else die("unknown argument " + a + "\nusage: et_runner --et-so SO --et-stubs DIR [--et-sdpa SO] [--repeat N] [--rounds R] [--per-call] [--threads N] [--ios-malloc] [--prewarm] PROGRAM.pte...");
  }
  if (o.et_so.empty() || o.et_stubs.empty() || o.programs.empty()) die("needs --et-so, --et-stubs and a .pte");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.child.empty()) return parent(o);
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(emit_log, __FILE__));
  executorch::runtime::runtime_init();
  return child(o, o.programs.at(0));
}
