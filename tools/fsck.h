// ptstore-fsck: an offline (or online: it only reads) check of an SSD-tier
// data directory (see man/ptstore-fsck.8).
//
// Every segment file ("seg-<16 hex digits>.pts") is scanned with the same
// scanner as ptstored's restart scan (storage/ssd_format/segment_scanner.h): segment
// header, every record header, every live record's payload checksum, and
// every compressed payload decompressed (the last two not with --quick).
// The result is a report per segment (records live / partially live /
// dead, their bytes, the corrupt regions with offsets and reasons), a
// report per namespace found (layout, tensors, tokens, bytes, compression)
// and a summary; as text, or as one JSON object.
//
// Exit status: kExitOk (0) when every segment was read and nothing is
// wrong; kExitFailure (1) when a problem was found (a corrupt region, a bad
// segment header, a file or directory that could not be read);
// kExitUsage (2) for a bad command line, including a DIR that does not
// exist or is not a directory (nothing was checked).
//
// A directory that ptstored is using can be checked: files are opened
// read-only, without O_DIRECT, and never locked. A segment whose first scan
// finds a problem is scanned again, and only what the second scan finds is
// reported, so that a record being appended at that moment is not taken
// for a torn one (as long as the append takes less than the re-read).
#pragma once

#include <ostream>
#include <string>

namespace ptstore::tools {

struct FsckOptions {
  std::string dir;
  bool quick = false;  // headers only: no payload checksums, no decompression
  bool list = false;   // every record
  bool json = false;
};

int RunFsck(const FsckOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ptstore::tools
