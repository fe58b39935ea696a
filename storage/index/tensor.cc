// Tensor's transitions (tensor.h). Each names the states it starts from; any
// other is a bug in the store, and going on would serve or free the wrong
// bytes, so it stops the process there, saying which transition from which
// state. Always on: the builds define NDEBUG, which would compile assert()
// away.
#include "storage/index/tensor.h"

#include <cstdio>
#include <cstdlib>

namespace ptstore::storage {

const char* ResidenceName(Tensor::Residence r) {
  switch (r) {
    case Tensor::Residence::kNowhere: return "nowhere";
    case Tensor::Residence::kDram: return "dram";
    case Tensor::Residence::kSsd: return "ssd";
    case Tensor::Residence::kDramAndSsd: return "dram+ssd";
  }
  return "?";
}

const char* KindName(Tensor::Kind k) {
  switch (k) {
    case Tensor::Kind::kOwned: return "owned";
    case Tensor::Kind::kRemote: return "remote";
    case Tensor::Kind::kTransient: return "transient";
  }
  return "?";
}

const char* LifeName(Tensor::Life l) {
  switch (l) {
    case Tensor::Life::kNew: return "new";
    case Tensor::Life::kIndexed: return "indexed";
    case Tensor::Life::kLeft: return "left";
  }
  return "?";
}

const char* IoName(Tensor::Io io) {
  switch (io) {
    case Tensor::Io::kNone: return "none";
    case Tensor::Io::kSpilling: return "spilling";
    case Tensor::Io::kFilling: return "filling";
    case Tensor::Io::kCopying: return "copying";
  }
  return "?";
}

void Tensor::Illegal(const char* transition) const {
  std::fprintf(stderr,
               "ptstore: illegal tensor transition %s of tensor %llu (residence %s, kind %s, life %s, io %s, "
               "stub %s, pins %u, holds %u)\n",
               transition, static_cast<unsigned long long>(id.value), ResidenceName(residence_), KindName(kind_),
               LifeName(life_), IoName(io_), stub_ ? "yes" : "no", pins_, holds_);
  std::abort();
}

const SsdLocation& Tensor::ssd() const {
  if (!on_ssd()) Illegal("ssd()");
  return ssd_;
}

const SsdLocation& Tensor::stub() const {
  if (!stub_) Illegal("stub()");
  return *stub_;
}

void Tensor::EnterIndex() {
  if (life_ != Life::kNew) Illegal("EnterIndex");
  life_ = Life::kIndexed;
}

void Tensor::LeaveIndex() {
  if (life_ != Life::kIndexed) Illegal("LeaveIndex");
  life_ = Life::kLeft;
}

void Tensor::MarkFilled(uint64_t offset, uint64_t allocated_bytes) {
  if (residence_ == Residence::kNowhere) {
    residence_ = Residence::kDram;
  } else if (residence_ == Residence::kSsd) {
    residence_ = Residence::kDramAndSsd;
  } else {
    Illegal("MarkFilled");
  }
  arena_offset = offset;
  allocated = allocated_bytes;
}

void Tensor::DropDram() {
  if (residence_ == Residence::kDram) {
    residence_ = Residence::kNowhere;
  } else if (residence_ == Residence::kDramAndSsd) {
    residence_ = Residence::kSsd;
  } else {
    Illegal("DropDram");
  }
  allocated = 0;
  if (kind_ == Kind::kTransient) kind_ = Kind::kRemote;  // a placeholder again
}

void Tensor::MarkSpilled(const SsdLocation& loc) {
  if (residence_ != Residence::kDram || kind_ != Kind::kOwned) Illegal("MarkSpilled");
  residence_ = Residence::kDramAndSsd;
  ssd_ = loc;
}

void Tensor::MoveRecord(const SsdLocation& loc) {
  if (!on_ssd()) Illegal("MoveRecord");
  ssd_ = loc;
}

void Tensor::DropSsd() {
  if (residence_ == Residence::kSsd) {
    residence_ = Residence::kNowhere;
  } else if (residence_ == Residence::kDramAndSsd) {
    residence_ = Residence::kDram;
  } else {
    Illegal("DropSsd");
  }
  ssd_ = SsdLocation{};
}

void Tensor::MarkRecovered(const SsdLocation& loc) {
  if (life_ != Life::kNew || residence_ != Residence::kNowhere || kind_ != Kind::kOwned) Illegal("MarkRecovered");
  residence_ = Residence::kSsd;
  ssd_ = loc;
}

void Tensor::BecomeRemote(uint32_t owner) {
  if (life_ != Life::kNew || residence_ != Residence::kNowhere || kind_ != Kind::kOwned) Illegal("BecomeRemote");
  kind_ = Kind::kRemote;
  owner_ = owner;
}

void Tensor::BecomeTransient() {
  if (kind_ != Kind::kRemote || residence_ != Residence::kDram) Illegal("BecomeTransient");
  kind_ = Kind::kTransient;
}

void Tensor::Adopt(uint32_t self) {
  if (kind_ != Kind::kRemote || residence_ != Residence::kDram || life_ != Life::kIndexed) Illegal("Adopt");
  kind_ = Kind::kOwned;
  owner_ = self;
}

void Tensor::SetStub(const SsdLocation& loc) {
  if (stub_) Illegal("SetStub");
  stub_ = loc;
}

void Tensor::MoveStub(const SsdLocation& loc) {
  if (!stub_) Illegal("MoveStub");
  stub_ = loc;
}

void Tensor::ForgetStub() {
  if (!stub_) Illegal("ForgetStub");
  stub_.reset();
}

void Tensor::BeginIo(Io io) {
  if (io_ != Io::kNone || io == Io::kNone) Illegal("BeginIo");
  io_ = io;
}

void Tensor::EndIo(Io io) {
  if (io_ != io || io == Io::kNone) Illegal("EndIo");
  io_ = Io::kNone;
}

bool Tensor::AddPin() { return pins_++ == 0; }

bool Tensor::DropPin() {
  if (pins_ == 0) Illegal("DropPin");
  return --pins_ == 0;
}

void Tensor::AddHold() { holds_++; }

void Tensor::DropHold() {
  if (holds_ == 0) Illegal("DropHold");
  holds_--;
}

}  // namespace ptstore::storage
