/* The ioctl ABI of a PTStore mount (mount.ptstore, ptstore(7)).
 *
 * A process that knows only a path asks:
 *
 *   PTSTORE_IOC_INFO   what a directory (the root, a namespace or an
 *                      increment; O_RDONLY | O_DIRECTORY) or an increment's
 *                      kv file is (namespace, layout, increment geometry,
 *                      tier, the store's arena size and node id);
 *   PTSTORE_IOC_PIN    pin the prefix that ends at an increment (or only
 *                      the increment's own bytes) and get its extents in the
 *                      store's shared arena, paged: the first call pins and
 *                      returns up to PTSTORE_IOC_MAX_EXTENTS extents, later
 *                      calls with the lease and `first` return the rest;
 *   PTSTORE_IOC_UNPIN  release a lease of this open file.
 *
 * PIN and UNPIN are asked of the increment's kv file, opened O_RDONLY:
 * pins belong to that open file, and closing it (or the process dying)
 * releases them. A directory answers INFO only (PIN there: EISDIR), because
 * the mount does not open directories (it answers the kernel's opendir with
 * ENOSYS, so a walk of the tree costs no opendir and releasedir round trip
 * per directory), so an open directory has nothing to hold a pin.
 *
 * The bytes are then copied out of the arena, which the process maps by
 * connecting to the local ptstored (libptstore: Client::LoadPath does all
 * of this). The caller needs read permission on the namespace.
 *
 * A FUSE mount only passes "restricted" ioctls, whose argument size is
 * encoded in the command and under 16 KiB: every struct here is fixed-size
 * and smaller. The ABI is versioned: a caller sets `version` to
 * PTSTORE_IOCTL_VERSION; a mount that does not speak it fails the call with
 * EPROTO (version 1 pinned on the increment's directory). Errors: ENOTTY
 * (not a PTStore directory or kv file), EISDIR (PIN or UNPIN on a
 * directory), ENOENT (the increment is gone), EACCES, EINVAL (bad
 * version/flags/paging), ENOMEM (the prefix does not fit in the arena at
 * once), EIO (the store failed).
 *
 * This header is C and C++.
 */
#ifndef PTSTORE_IOCTL_H_
#define PTSTORE_IOCTL_H_

#include <linux/ioctl.h>
#include <stdint.h>

#define PTSTORE_IOCTL_VERSION 2u
#define PTSTORE_IOC_MAGIC 0xB7

/* ptstore_ioc_info.kind */
#define PTSTORE_KIND_ROOT 1u
#define PTSTORE_KIND_NAMESPACE 2u
#define PTSTORE_KIND_INCREMENT 3u

/* ptstore_ioc_info.tier: bits */
#define PTSTORE_TIER_DRAM 1u
#define PTSTORE_TIER_SSD 2u

/* ptstore_ioc_pin.flags */
#define PTSTORE_PIN_WHOLE_PREFIX 1u /* every byte of the prefix, not only the increment's */

#define PTSTORE_IOC_MAX_EXTENTS 512u
#define PTSTORE_IOC_NAME_MAX 136u /* namespace names are at most 128 bytes */

struct ptstore_ioc_info {
  uint32_t version; /* in: PTSTORE_IOCTL_VERSION */
  uint32_t kind;    /* out: PTSTORE_KIND_* */
  char ns[PTSTORE_IOC_NAME_MAX]; /* out: namespace (empty for the root), NUL-terminated */
  /* The namespace's layout (kind >= NAMESPACE). A grouped layout (a hybrid
   * model's KV cache groups, include/ptstore/layout.h) has layers, kv_heads,
   * head_dim and dtype 0, and the right block_tokens and bytes_per_token;
   * its groups are in the namespace's .layout file (Layout::Parse). */
  uint32_t layers, kv_heads, head_dim, dtype, block_tokens;
  uint32_t ns_uid, ns_gid, ns_mode;
  uint64_t bytes_per_token;
  /* The increment (kind == INCREMENT). */
  uint8_t key[16];    /* chain key of its last block (hi then lo, big-endian hex order) */
  uint8_t parent[16]; /* its parent's key; zero at the root of the namespace */
  uint64_t start_token, tokens, bytes, hits, tensor;
  uint32_t tier, children;
  /* The store. */
  uint64_t arena_bytes;
  uint32_t node_id;
  uint32_t reserved;
};

struct ptstore_ioc_extent {
  uint64_t arena_offset; /* where the bytes are in the store's arena */
  uint64_t length;
};

struct ptstore_ioc_pin {
  uint32_t version; /* in: PTSTORE_IOCTL_VERSION */
  uint32_t flags;   /* in: PTSTORE_PIN_* */
  uint64_t lease;   /* in: 0 to pin now, else a lease of this open file to page through; out: the lease */
  uint32_t first;   /* in: index of the first extent wanted (0 when pinning) */
  uint32_t count;   /* out: extents filled in below */
  uint32_t total;   /* out: extents of the whole pin */
  uint32_t reserved;
  uint64_t tokens;  /* out: tokens the pinned bytes hold */
  uint64_t bytes;   /* out: bytes of the whole pin (sum of all its extents' lengths) */
  struct ptstore_ioc_extent extents[PTSTORE_IOC_MAX_EXTENTS];
};

struct ptstore_ioc_unpin {
  uint32_t version; /* in: PTSTORE_IOCTL_VERSION */
  uint32_t reserved;
  uint64_t lease;   /* in */
};

#define PTSTORE_IOC_INFO _IOWR(PTSTORE_IOC_MAGIC, 1, struct ptstore_ioc_info)
#define PTSTORE_IOC_PIN _IOWR(PTSTORE_IOC_MAGIC, 2, struct ptstore_ioc_pin)
#define PTSTORE_IOC_UNPIN _IOW(PTSTORE_IOC_MAGIC, 3, struct ptstore_ioc_unpin)

#ifdef __cplusplus
static_assert(sizeof(struct ptstore_ioc_info) < 16384, "restricted FUSE ioctls carry at most 16 KiB");
static_assert(sizeof(struct ptstore_ioc_pin) < 16384, "restricted FUSE ioctls carry at most 16 KiB");
#endif

#endif /* PTSTORE_IOCTL_H_ */
