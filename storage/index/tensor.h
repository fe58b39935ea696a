// A tensor in the node's arena: the immutable bytes of one increment as it
// was saved (or fetched, for a replica). Radix nodes point into it; splitting
// a node splits metadata, never the tensor.
//
// Its state is three enums, each with one meaning, changed only by the
// transitions below (each checks the state it starts from and stops the
// process with a message when it is not one it may: a bug in the store):
// - Residence, where its bytes are: nowhere (a placeholder, or a tensor on
//   its way out), DRAM, SSD, or both. An owned tensor evicted from DRAM is
//   written to SSD (spilled: kDram -> kDramAndSsd, then its DRAM goes ->
//   kSsd) and stays in the index; a pin reads it back (fills it: kSsd ->
//   kDramAndSsd).
// - Kind, whose bytes they are: this node's (kOwned), another node's
//   (kRemote: a placeholder while not in DRAM, a kept replica while in
//   DRAM), or another node's fetched for one load (kTransient: in DRAM
//   until its last pin goes, then a placeholder again). A remote tensor is
//   never spilled; its record on SSD, if any, is a stub (tokens and owner).
// - Life, its place in the index: made and not yet filed (kNew), in the
//   index (kIndexed), or out of it for good (kLeft). The struct is freed
//   once it is out of the index (kNew or kLeft) and nothing refers to it:
//   no pin, no hold (storage/cache/tensor_refs.h), no I/O (Io).
//
// Thread safety: Tensors are owned by the Store and touched only under its
// mutex.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ptstore/types.h"
#include "storage/ssd_format/record.h"  // SsdLocation

namespace ptstore::storage {

struct Namespace;
struct RadixNode;
// The Store's typed references to a tensor (storage/cache/tensor_refs.h).
enum class TensorRefKind { kHold, kPin };
template <TensorRefKind K>
class TensorRef;

struct Tensor {
 public:
  enum class Residence : uint8_t { kNowhere, kDram, kSsd, kDramAndSsd };
  enum class Kind : uint8_t { kOwned, kRemote, kTransient };
  enum class Life : uint8_t { kNew, kIndexed, kLeft };
  // I/O in flight on it, outside the store's mutex: its bytes and record
  // must stay where they are until it ends.
  enum class Io : uint8_t { kNone, kSpilling, kFilling, kCopying };

  TensorId id;
  CacheClass cache_class = CacheClass::kOwned;
  Namespace* ns = nullptr;
  uint64_t arena_offset = 0;   // where the bytes start in the arena (when in_dram)
  uint64_t bytes = 0;          // logical length (whole blocks)
  uint64_t allocated = 0;      // bytes reserved in the allocator (rounded up; when in_dram)
  uint64_t start_token = 0;    // position of its first token in the prefix
  uint64_t tokens = 0;
  uint64_t spill_failed_gen = 0;  // a spill failed in this SSD generation: do not retry yet
  // The times its record (`ssd` or `stub`) holds on SSD; the record is
  // rewritten when its nodes' times have moved on (Store::SyncTimes).
  Times record_times;
  uint64_t hits = 0;           // loads that used it
  double cost = 0;             // GDSF: recompute cost of its tokens
  double priority = 0;         // GDSF: L + hits * cost / size (>= descendants)

  // What it counts against its namespace's quotas now (Store::ChargeLocked):
  // its allocation while it is in the index and in DRAM, its record's
  // footprint while it is in the index and on SSD; 0 once out of the index.
  uint64_t charged_dram = 0;
  uint64_t charged_ssd = 0;

  std::vector<RadixNode*> nodes;  // radix nodes that point into it (a chain)
  // Children of its nodes that belong to other tensors. A tensor is a leaf
  // (evictable before its ancestors) when this is 0.
  uint32_t foreign_children = 0;

  // ------------------------------------------------------------- queries
  Residence residence() const { return residence_; }
  Kind kind() const { return kind_; }
  Life life() const { return life_; }
  Io io() const { return io_; }
  bool in_dram() const { return residence_ == Residence::kDram || residence_ == Residence::kDramAndSsd; }
  bool on_ssd() const { return residence_ == Residence::kSsd || residence_ == Residence::kDramAndSsd; }
  bool remote() const { return kind_ != Kind::kOwned; }
  bool transient() const { return kind_ == Kind::kTransient; }
  bool in_index() const { return life_ == Life::kIndexed; }
  bool busy() const { return io_ != Io::kNone; }
  // Its record on SSD (REQUIRES: on_ssd()).
  const SsdLocation& ssd() const;
  // A remote tensor's record (kRemote: tokens and owner, no bytes) on SSD,
  // written when an owned tensor below it is spilled. An adopted replica
  // keeps the stub it had.
  bool stub_on_ssd() const { return stub_.has_value(); }
  const SsdLocation& stub() const;  // REQUIRES: stub_on_ssd()
  // The node that owns its bytes (REQUIRES: remote(), or an adopted one).
  uint32_t owner() const { return owner_; }
  uint32_t pins() const { return pins_; }    // leases on its DRAM bytes
  uint32_t holds() const { return holds_; }  // keep it in the index / its struct alive

  // --------------------------------------------------------- transitions
  // kNew -> kIndexed: filed in the index.
  void EnterIndex();
  // kIndexed -> kLeft: its last node left the index.
  void LeaveIndex();
  // Its bytes arrived in DRAM at `offset` (`allocated` reserved): kNowhere
  // -> kDram (a save, a fetch), kSsd -> kDramAndSsd (a fill).
  void MarkFilled(uint64_t offset, uint64_t allocated_bytes);
  // Its DRAM copy went: kDram -> kNowhere, kDramAndSsd -> kSsd. A transient
  // replica is a placeholder (kRemote) again.
  void DropDram();
  // An owned tensor's record was written: kDram -> kDramAndSsd.
  void MarkSpilled(const SsdLocation& loc);
  // Its record was copied to `loc` (compaction). REQUIRES: on_ssd().
  void MoveRecord(const SsdLocation& loc);
  // Its record went: kSsd -> kNowhere, kDramAndSsd -> kDram.
  void DropSsd();
  // Recovery: a new owned tensor whose bytes its record holds
  // (kNew, kNowhere -> kSsd).
  void MarkRecovered(const SsdLocation& loc);
  // A new tensor is another node's: kNew, kOwned, kNowhere -> kRemote.
  void BecomeRemote(uint32_t owner);
  // A fetched replica serves one load only: kRemote in DRAM -> kTransient.
  void BecomeTransient();
  // A kept replica of a restarted owner becomes this node's `self`'s own:
  // kRemote in DRAM, in the index -> kOwned.
  void Adopt(uint32_t self);
  // Its stub was written / copied / went (Store::DropStubLocked), or turned
  // out corrupt (forgotten without a kill: ForgetStub).
  void SetStub(const SsdLocation& loc);  // REQUIRES: !stub_on_ssd()
  void MoveStub(const SsdLocation& loc);  // REQUIRES: stub_on_ssd()
  void ForgetStub();                      // REQUIRES: stub_on_ssd()
  // I/O starts on it (REQUIRES: io() == kNone) and ends (REQUIRES: io() == io).
  void BeginIo(Io io);
  void EndIo(Io io);
  // Pin counts (Store::PinLocked and UnpinLocked only): AddPin returns
  // whether it is the first, DropPin whether it was the last.
  bool AddPin();
  bool DropPin();

 private:
  // The only way to hold one: TensorRef<kHold> (TensorHold). The template
  // as a whole is the friend, since clang checks access in both branches of
  // its `if constexpr` (kPin never calls these).
  template <TensorRefKind K>
  friend class TensorRef;
  void AddHold();
  void DropHold();
  // What a failed transition says before it stops the process.
  [[noreturn]] void Illegal(const char* transition) const;

  Residence residence_ = Residence::kNowhere;
  Kind kind_ = Kind::kOwned;
  Life life_ = Life::kNew;
  Io io_ = Io::kNone;
  SsdLocation ssd_;                  // when on_ssd()
  std::optional<SsdLocation> stub_;
  uint32_t owner_ = 0;               // node that owns its bytes (this node unless remote)
  uint32_t pins_ = 0;
  uint32_t holds_ = 0;               // saves hanging below it, I/O over its struct: keep it
};

const char* ResidenceName(Tensor::Residence r);
const char* KindName(Tensor::Kind k);
const char* LifeName(Tensor::Life l);
const char* IoName(Tensor::Io io);

}  // namespace ptstore::storage
