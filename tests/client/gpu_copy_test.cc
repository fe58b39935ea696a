// The GPU copy path (include/ptstore/gpu.h): LoadToDevice against a real
// ptstored (byte for byte, registered and staging arenas), the gather kernel
// against a CPU reference (bf16/fp16/fp32/fp8, vLLM's layouts, random block
// ids, partial last blocks, several source segments, device and registered
// host sources), and the error cases.
//
// Without a CUDA device every test that needs one is skipped (GTEST_SKIP,
// as here and in CI); with PTSTORE_GPU_REQUIRED=1 in the environment
// (scripts/gpu-check) it fails instead, so a GPU run never passes by skipping.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ptstore/client.h"
#include "ptstore/gpu.h"
#include "tests/client/gpu_reference.h"
#include "tests/testing/client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/generators.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using gpu::GatherMode;
using gpu::PagedKVCache;
using gpu::PagedLoadOptions;
using gpu::TokenMajorSegment;
using testing::ConnectTo;
using testing::Daemon;
using testing::GatherCase;
using testing::RandomBlockIds;
using testing::RandomBytes;
using testing::ReferenceGather;
using testing::LayerBytes;
using testing::RandomTokens;

bool GpuRequired() {
  const char* v = std::getenv("PTSTORE_GPU_REQUIRED");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// Skips (or, with PTSTORE_GPU_REQUIRED, fails) the test without a device.
#define PTS_REQUIRE_GPU()                                                                      \
  do {                                                                                         \
    auto pts_n_ = gpu::DeviceCount();                                                          \
    if (!pts_n_.ok()) {                                                                        \
      if (GpuRequired()) FAIL() << "PTSTORE_GPU_REQUIRED is set, but " << pts_n_.status().ToString(); \
      GTEST_SKIP() << pts_n_.status().message();                          \
    }                                                                                          \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

// Device memory for a test.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&p_, std::max<size_t>(bytes, 1)) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }
  size_t size() const { return bytes_; }
  void Fill(uint8_t byte) { cudaMemset(p_, byte, bytes_); }
  std::vector<uint8_t> ToHost() const {
    std::vector<uint8_t> out(bytes_);
    cudaMemcpy(out.data(), p_, bytes_, cudaMemcpyDeviceToHost);
    return out;
  }
  void FromHost(const std::vector<uint8_t>& v) { cudaMemcpy(p_, v.data(), v.size(), cudaMemcpyHostToDevice); }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// KV of `tokens` tokens whose bytes depend on each token's position and id
// only, so two prompts sharing a prefix have the same KV for it.
std::vector<uint8_t> KvFor(const std::vector<uint32_t>& tokens, const Layout& l) {
  const uint64_t bpt = l.BytesPerToken();
  std::vector<uint8_t> kv(tokens.size() * bpt);
  for (size_t t = 0; t < tokens.size(); ++t) {
    std::mt19937 rng(tokens[t] * 2654435761u + static_cast<uint32_t>(t));
    for (uint64_t b = 0; b < bpt; ++b) kv[t * bpt + b] = static_cast<uint8_t>(rng());
  }
  return kv;
}

// Device layers for `c` (its pointers filled in), initialised to a sentinel.
struct DevicePaged {
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<std::vector<uint8_t>> host;  // what the reference writes
};
DevicePaged MakePaged(const Layout& l, PagedKVCache& c, size_t num_layers, uint8_t sentinel = 0xA5) {
  DevicePaged p;
  c.layers.clear();
  const uint64_t bytes = LayerBytes(l, c);
  for (size_t i = 0; i < num_layers; ++i) {
    p.bufs.push_back(std::make_unique<DeviceBuffer>(bytes));
    p.bufs.back()->Fill(sentinel);
    c.layers.push_back(p.bufs.back()->data());
    p.host.emplace_back(bytes, sentinel);
  }
  return p;
}

void ExpectSame(const DevicePaged& p) {
  cudaDeviceSynchronize();
  for (size_t i = 0; i < p.bufs.size(); ++i) {
    std::vector<uint8_t> got = p.bufs[i]->ToHost();
    const std::vector<uint8_t>& want = p.host[i];
    ASSERT_EQ(got.size(), want.size());
    auto diff = std::mismatch(got.begin(), got.end(), want.begin());
    ASSERT_TRUE(diff.first == got.end()) << "layer " << i << " differs at byte " << (diff.first - got.begin())
                                         << " of " << got.size();
  }
}

// ---------------------------------------------------------- no device

// Runs everywhere: without a device the calls fail with Unavailable and
// CUDA's reason; argument errors come first, without touching CUDA.
TEST(GpuNoDevice, ClearErrorsWithoutADevice) {
  auto n = gpu::DeviceCount();
  if (n.ok()) {
    EXPECT_GE(*n, 1);
    return;
  }
  EXPECT_FALSE(GpuRequired()) << n.status().ToString();
  EXPECT_ERROR(n, Code::kUnavailable);
  EXPECT_NE(n.status().message().find("no usable CUDA device"), std::string::npos) << n.status().ToString();
  std::cout << "without a device: " << n.status().ToString() << "\n";

  PinnedPrefix empty;
  EXPECT_OK(gpu::LoadToDevice(empty, nullptr, 0, nullptr));
  Status s = gpu::LoadToDevice(empty, nullptr, 1, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);

  Layout l{2, 2, 8, DType::kFP16, 16};
  PagedKVCache c = PagedKVCache::FlashAttention({reinterpret_cast<void*>(0x1000)}, l, 4, 16);
  std::vector<uint8_t> src(l.BytesPerToken() * 16);
  TokenMajorSegment seg{src.data(), 16};
  std::vector<int32_t> ids{0};
  s = gpu::GatherToPagedKV({&seg, 1}, l, c, ids, 16, nullptr);
  EXPECT_ERROR(s, Code::kUnavailable);
  s = gpu::GatherToPagedKV({&seg, 1}, l, c, ids, 17, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);  // sizes first
  // A grouped layout is refused before anything else, device or not.
  const Layout grouped = Layout::FromGroups({LayoutGroup::Full(2, 2, 8, DType::kFP16), LayoutGroup::State(2, 64)}, 16);
  s = gpu::GatherToPagedKV({&seg, 1}, grouped, c, ids, 16, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("dense layouts only"), std::string::npos) << s.ToString();
  s = gpu::LoadToPagedKV(empty, grouped, c, ids, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("dense layouts only"), std::string::npos) << s.ToString();
}

// ------------------------------------------------- gather kernel alone

class GpuGather : public ::testing::Test {
 protected:
  void SetUp() override { PTS_REQUIRE_GPU(); }
};

// Page-aligned host memory registered with CUDA (mapped), for zero-copy sources.
class RegisteredHost {
 public:
  explicit RegisteredHost(size_t bytes) : bytes_((bytes + 4095) / 4096 * 4096) {
    p_ = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes_));
    ok_ = cudaHostRegister(p_, bytes_, cudaHostRegisterMapped) == cudaSuccess;
  }
  ~RegisteredHost() {
    if (ok_) cudaHostUnregister(p_);
    std::free(p_);
  }
  RegisteredHost(const RegisteredHost&) = delete;
  RegisteredHost& operator=(const RegisteredHost&) = delete;
  bool ok() const { return ok_; }
  uint8_t* data() const { return p_; }

 private:
  size_t bytes_;
  uint8_t* p_ = nullptr;
  bool ok_ = false;
};

TEST_F(GpuGather, MatchesCpuReference) {
  uint32_t seed = 1;
  for (const GatherCase& gc : testing::GatherCases()) {
    SCOPED_TRACE(gc.name);
    const Layout& l = gc.layout;
    const uint64_t bpt = l.BytesPerToken();
    PagedKVCache c = gc.Cache();
    DevicePaged paged = MakePaged(l, c, gc.Layers());

    std::vector<uint8_t> src = RandomBytes(gc.tokens * bpt, seed++);
    // The source in `segments` pieces of whole tokens, each its own allocation.
    std::vector<TokenMajorSegment> segs;
    std::vector<std::unique_ptr<DeviceBuffer>> dev_pieces;
    std::vector<std::unique_ptr<RegisteredHost>> host_pieces;
    uint64_t at = 0;
    for (int s = 0; s < gc.segments; ++s) {
      const uint64_t n = gc.SegmentTokens(s, at);
      std::vector<uint8_t> piece(src.begin() + at * bpt, src.begin() + (at + n) * bpt);
      if (gc.host_source) {
        host_pieces.push_back(std::make_unique<RegisteredHost>(piece.size()));
        ASSERT_TRUE(host_pieces.back()->ok()) << "cudaHostRegister of a test buffer failed";
        std::memcpy(host_pieces.back()->data(), piece.data(), piece.size());
        segs.push_back({host_pieces.back()->data(), n});
      } else {
        dev_pieces.push_back(std::make_unique<DeviceBuffer>(piece.size()));
        dev_pieces.back()->FromHost(piece);
        segs.push_back({dev_pieces.back()->data(), n});
      }
      at += n;
    }
    const std::vector<int32_t> ids =
        RandomBlockIds((gc.tokens + gc.block_size - 1) / gc.block_size, gc.num_blocks, seed++);
    ReferenceGather(src.data(), gc.tokens, l, c, ids, paged.host);

    Status s = gpu::GatherToPagedKV(segs, l, c, ids, gc.tokens, nullptr);
    ASSERT_OK(s);
    CUDA_OK(cudaDeviceSynchronize());
    ExpectSame(paged);
  }
}

TEST_F(GpuGather, Errors) {
  Layout l{2, 2, 16, DType::kBF16, 16};
  PagedKVCache c = PagedKVCache::FlashAttention({}, l, 8, 16);
  DevicePaged paged = MakePaged(l, c, 2);
  DeviceBuffer src(l.BytesPerToken() * 64);
  TokenMajorSegment seg{src.data(), 64};
  std::vector<int32_t> ids{0, 1, 2, 3};

  EXPECT_OK(gpu::GatherToPagedKV({&seg, 1}, l, c, ids, 64, nullptr));

  // Too few block ids for the tokens.
  Status s = gpu::GatherToPagedKV({&seg, 1}, l, c, std::span(ids).first(3), 64, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("need 4 block ids"), std::string::npos) << s.ToString();
  // Ids outside the cache.
  std::vector<int32_t> bad{0, 1, 8, 3};
  s = gpu::GatherToPagedKV({&seg, 1}, l, c, bad, 64, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  bad[2] = -1;
  s = gpu::GatherToPagedKV({&seg, 1}, l, c, bad, 64, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  // Source too small.
  s = gpu::GatherToPagedKV({&seg, 1}, l, c, ids, 65, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  // Null source, null layer.
  TokenMajorSegment null_seg{nullptr, 64};
  s = gpu::GatherToPagedKV({&null_seg, 1}, l, c, ids, 64, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  PagedKVCache nulls = c;
  nulls.layers[1] = nullptr;
  s = gpu::GatherToPagedKV({&seg, 1}, l, nulls, ids, 64, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 1"), std::string::npos) << s.ToString();
  // Unregistered host memory: as the source, as a layer.
  std::vector<uint8_t> host(l.BytesPerToken() * 64);
  TokenMajorSegment host_seg{host.data(), 64};
  s = gpu::GatherToPagedKV({&host_seg, 1}, l, c, ids, 64, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("cudaHostRegister"), std::string::npos) << s.ToString();
  PagedKVCache on_host = c;
  std::vector<uint8_t> host_layer(LayerBytes(l, c));
  on_host.layers[0] = host_layer.data();
  s = gpu::GatherToPagedKV({&seg, 1}, l, on_host, ids, 64, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not device memory"), std::string::npos) << s.ToString();
  // More layers than the layout has.
  PagedKVCache too_many = c;
  too_many.first_layer = 1;
  s = gpu::GatherToPagedKV({&seg, 1}, l, too_many, ids, 64, nullptr);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  // Zero tokens: nothing to do.
  EXPECT_OK(gpu::GatherToPagedKV({}, l, c, {}, 0, nullptr));
}

// ------------------------------------------- against a real ptstored

class GpuDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PTS_REQUIRE_GPU();
    Daemon::Options o;
    o.arena_size = "128MiB";
    Status s = daemon_.Start(o);
    ASSERT_OK(s);
    auto c = ConnectTo(daemon_.socket_path());
    ASSERT_OK(c);
    client_ = std::move(c).value();
    ASSERT_TRUE(client_->mapped());
    CUDA_OK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Saves `tokens` (whole blocks) with KvFor's bytes.
  void Save(const std::string& ns, const std::vector<uint32_t>& tokens, const Layout& l) {
    std::vector<uint8_t> kv = KvFor(tokens, l);
    auto r = client_->Save(ns, tokens, kv.data(), kv.size());
    ASSERT_OK(r);
  }

  // A namespace with a prefix stored in three increments (and a branch), so
  // its pin has several extents. Returns the longest prompt.
  std::vector<uint32_t> ThreeIncrements(const std::string& ns, const Layout& l, uint64_t blocks_each) {
    auto info = client_->CreateNamespace(ns, l);
    EXPECT_OK(info);
    std::vector<uint32_t> t = RandomTokens(7, 3 * blocks_each * l.block_tokens);
    std::vector<uint32_t> a(t.begin(), t.begin() + blocks_each * l.block_tokens);
    std::vector<uint32_t> b(t.begin(), t.begin() + 2 * blocks_each * l.block_tokens);
    std::vector<uint32_t> branch = b;
    branch.back() ^= 1;  // splits the second increment's last block off
    Save(ns, a, l);
    Save(ns, branch, l);
    Save(ns, b, l);
    Save(ns, t, l);
    return t;
  }

  Daemon daemon_;
  std::unique_ptr<Client> client_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(GpuDaemonTest, LoadToDeviceIsByteExact) {
  Layout l{4, 2, 64, DType::kBF16, 16};  // 2 KiB per token
  std::vector<uint32_t> t = ThreeIncrements("gpu", l, 5);
  auto info = gpu::PrepareArena(*client_);
  ASSERT_OK(info);
  std::cout << "arena path: " << gpu::ArenaPathName(info->path) << " (" << info->detail << "), registered in "
            << info->register_seconds << " s\n";
  EXPECT_NE(info->path, gpu::ArenaPath::kNone);

  auto pin = client_->Pin("gpu", t);
  ASSERT_OK(pin);
  ASSERT_EQ(pin->tokens(), t.size());
  EXPECT_GE(pin->extents().size(), 3u);
  const std::vector<uint8_t> want = KvFor(t, l);
  ASSERT_EQ(pin->bytes(), want.size());

  for (uint64_t bytes : {pin->bytes(), pin->bytes() - 777, uint64_t{1}, uint64_t{0}}) {
    SCOPED_TRACE(bytes);
    DeviceBuffer d(pin->bytes());
    d.Fill(0x5A);
    Status s = gpu::LoadToDevice(*pin, d.data(), bytes, stream_);
    ASSERT_OK(s);
    CUDA_OK(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> got = d.ToHost();
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + bytes, want.begin()));
    EXPECT_TRUE(std::all_of(got.begin() + bytes, got.end(), [](uint8_t b) { return b == 0x5A; }));
  }
  EXPECT_OK(pin->Release());
}

TEST_F(GpuDaemonTest, StagingPathIsByteExact) {
  // A client that does not register its arena: chunked, double-buffered
  // copies through pinned staging buffers (16 chunks of 64 KiB here).
  auto c2 = ConnectTo(daemon_.socket_path());
  ASSERT_OK(c2);
  gpu::GpuOptions o;
  o.register_arena = false;
  o.staging_chunk_bytes = 64 << 10;
  auto info = gpu::PrepareArena(**c2, o);
  ASSERT_OK(info);
  EXPECT_EQ(info->path, gpu::ArenaPath::kStaging) << info->detail;

  Layout l{4, 2, 64, DType::kBF16, 16};
  std::vector<uint32_t> t = ThreeIncrements("staged", l, 11);
  auto pin = (*c2)->Pin("staged", t);
  ASSERT_OK(pin);
  const std::vector<uint8_t> want = KvFor(t, l);
  ASSERT_EQ(pin->bytes(), want.size());
  EXPECT_GT(pin->bytes(), 16u * o.staging_chunk_bytes);
  for (uint64_t bytes : {pin->bytes(), pin->bytes() / 3 + 1}) {
    SCOPED_TRACE(bytes);
    DeviceBuffer d(pin->bytes());
    d.Fill(0);
    // Twice on the same buffers: the second load waits for the first one's DMA.
    for (int rep = 0; rep < 2; ++rep) {
      Status s = gpu::LoadToDevice(*pin, d.data(), bytes, stream_);
      ASSERT_OK(s);
    }
    CUDA_OK(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> got = d.ToHost();
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + bytes, want.begin()));
  }
  // A direct gather needs the registration this client does not have.
  PagedKVCache c = PagedKVCache::FlashAttention({}, l, 64, 16);
  DevicePaged paged = MakePaged(l, c, l.layers);
  std::vector<int32_t> ids = RandomBlockIds(t.size() / 16, 64, 3);
  PagedLoadOptions po;
  po.mode = GatherMode::kDirect;
  Status s = gpu::LoadToPagedKV(*pin, l, c, ids, stream_, po);
  EXPECT_ERROR(s, Code::kUnavailable);
  // kAuto stages.
  po.mode = GatherMode::kAuto;
  s = gpu::LoadToPagedKV(*pin, l, c, ids, stream_, po);
  ASSERT_OK(s);
  ReferenceGather(want.data(), t.size(), l, c, ids, paged.host);
  ExpectSame(paged);
}

TEST_F(GpuDaemonTest, LoadToPagedKVMatchesReference) {
  for (DType dt : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    Layout l{4, 4, 64, dt, 16};
    const std::string ns = "paged-" + std::string(DTypeName(dt));
    std::vector<uint32_t> t = ThreeIncrements(ns, l, 4);
    auto pin = client_->Pin(ns, t);
    ASSERT_OK(pin);
    std::vector<uint8_t> host(pin->bytes());
    ASSERT_OK(pin->CopyTo(host.data(), host.size()));

    struct Variant {
      GatherMode mode;
      uint64_t start, tokens, staging_bytes;
    };
    const Variant variants[] = {
        {GatherMode::kDirect, 0, PagedLoadOptions::kToEnd, 0},
        {GatherMode::kDirect, 32, 16 * 5 + 7, 0},             // from a block boundary, partial last block
        {GatherMode::kStaged, 0, PagedLoadOptions::kToEnd, 256 << 20},
        {GatherMode::kStaged, 48, 16 * 6 + 3, 5 * l.BytesPerToken()},  // chunks of 5 tokens
        {GatherMode::kAuto, 16, PagedLoadOptions::kToEnd, 0},
    };
    uint32_t seed = 11;
    for (const Variant& v : variants) {
      SCOPED_TRACE(std::string(gpu::GatherModeName(v.mode)) + " from token " + std::to_string(v.start));
      const uint64_t n = v.tokens == PagedLoadOptions::kToEnd ? t.size() - v.start : v.tokens;
      PagedKVCache c = PagedKVCache::FlashAttention({}, l, 96, 16);
      DevicePaged paged = MakePaged(l, c, l.layers);
      std::vector<int32_t> ids = RandomBlockIds((n + 15) / 16, 96, seed++);
      PagedLoadOptions po;
      po.mode = v.mode;
      po.start_token = v.start;
      po.tokens = v.tokens;
      if (v.staging_bytes) po.staging_bytes = v.staging_bytes;
      Status s = gpu::LoadToPagedKV(*pin, l, c, ids, stream_, po);
      ASSERT_OK(s);
      CUDA_OK(cudaStreamSynchronize(stream_));
      ReferenceGather(host.data() + v.start * l.BytesPerToken(), n, l, c, ids, paged.host);
      ExpectSame(paged);
    }
  }
}

TEST_F(GpuDaemonTest, Errors) {
  Layout l{2, 2, 32, DType::kFP16, 16};
  std::vector<uint32_t> t = ThreeIncrements("err", l, 2);
  auto pin = client_->Pin("err", t);
  ASSERT_OK(pin);
  DeviceBuffer d(pin->bytes());

  // LoadToDevice: null destination, too many bytes, host memory as the destination.
  Status s = gpu::LoadToDevice(*pin, nullptr, 16, stream_);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  s = gpu::LoadToDevice(*pin, d.data(), pin->bytes() + 1, stream_);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  std::vector<uint8_t> host(pin->bytes());
  s = gpu::LoadToDevice(*pin, host.data(), host.size(), stream_);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not device memory"), std::string::npos) << s.ToString();
  void* pinned_host = nullptr;
  CUDA_OK(cudaHostAlloc(&pinned_host, 4096, cudaHostAllocMapped));
  s = gpu::LoadToDevice(*pin, pinned_host, 4096, stream_);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("registered host memory"), std::string::npos) << s.ToString();
  cudaFreeHost(pinned_host);

  // LoadToPagedKV: a layout that does not match, ranges past the end, too few ids.
  PagedKVCache c = PagedKVCache::FlashAttention({}, l, 16, 16);
  DevicePaged paged = MakePaged(l, c, l.layers);
  std::vector<int32_t> ids = RandomBlockIds(t.size() / 16, 16, 5);
  Layout wrong = l;
  wrong.head_dim = 64;
  s = gpu::LoadToPagedKV(*pin, wrong, c, ids, stream_);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("layout"), std::string::npos) << s.ToString();
  PagedLoadOptions po;
  po.start_token = t.size() + 1;
  s = gpu::LoadToPagedKV(*pin, l, c, ids, stream_, po);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  po.start_token = 16;
  po.tokens = t.size();
  s = gpu::LoadToPagedKV(*pin, l, c, ids, stream_, po);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  s = gpu::LoadToPagedKV(*pin, l, c, std::span(ids).first(1), stream_);
  EXPECT_ERROR(s, Code::kInvalidArgument);

  // A released pin.
  ASSERT_OK(pin->Release());
  s = gpu::LoadToDevice(*pin, d.data(), 16, stream_);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  s = gpu::LoadToPagedKV(*pin, l, c, ids, stream_);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  // An empty pin.
  PinnedPrefix empty;
  EXPECT_OK(gpu::LoadToDevice(empty, d.data(), 0, stream_));
  s = gpu::PrepareArena(empty).status();
  EXPECT_ERROR(s, Code::kInvalidArgument);
}

}  // namespace
}  // namespace ptstore
