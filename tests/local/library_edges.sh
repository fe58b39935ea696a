#!/usr/bin/env bash
# What clients link stays clear of the node-to-node transport: libptstore
# (ptstore_client), the local protocol (ptstore_local), the mount
# (ptstore_fs, ptstore-fuse) and the Python module need none of libfabric,
# libibverbs or libcrypto, and reference nothing of rdma:: or storage::
# (docs/architecture.md, "Layers"). Fails naming each artifact and what it
# needs.
#
#   library_edges.sh <build dir>
set -uo pipefail
build=${1:?usage: library_edges.sh <build dir>}
bad=0
fail() { echo "library_edges: $*"; bad=1; }

# Static libraries: no undefined reference into the transport or the server.
for lib in local/libptstore_local.a client/libptstore_client.a fs/libptstore_fs.a; do
  [ -f "$build/$lib" ] || { fail "$lib: not built"; continue; }
  refs=$(nm -C --undefined-only "$build/$lib" 2>/dev/null |
         grep -E ' U (ptstore::rdma::|ptstore::storage::|EVP_|HMAC|CRYPTO_|fi_|ibv_)' | sort -u | head -5)
  [ -z "$refs" ] || fail "$lib references the transport or the server:"$'\n'"$refs"
done

# Linked binaries: no such shared library needed.
bins=("$build/fs/ptstore-fuse")
while IFS= read -r so; do bins+=("$so"); done < <(find "$build/python" -name '_ptstore*.so' 2>/dev/null)
for bin in "${bins[@]}"; do
  [ -f "$bin" ] || { fail "$bin: not built"; continue; }
  needed=$(readelf -d "$bin" | grep NEEDED | grep -E 'libfabric|libibverbs|libcrypto|libssl')
  [ -z "$needed" ] || fail "${bin#$build/} needs:"$'\n'"$needed"
done

# The check itself must see what it forbids: ptstored links all three.
readelf -d "$build/storage/ptstored" | grep NEEDED | grep -q libfabric ||
  fail "storage/ptstored needs no libfabric: the check looks at the wrong thing"

[ "$bad" = 0 ] && echo "library_edges: the client side links no libfabric, ibverbs or libcrypto (${#bins[@]} binaries, 3 libraries)"
exit "$bad"
