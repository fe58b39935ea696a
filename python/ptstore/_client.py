"""ptstore.Client and ptstore.Pin: libptstore for numpy arrays and torch tensors."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _ptstore
from ._arrays import as_tokens, empty_kv, kv_buffer, raw_buffer, shape_of
from ._errors import InvalidArgument, NotFound
from ._ptstore import (CostModel, Extent, Increment, Layout, LoadPlan, LookupResult, NamespaceInfo, NamespaceQuota, PrefixLocation,
                       PrefixNode, RemoveResult, SaveResult, Stats)

TokensLike = Union[Sequence[int], np.ndarray, Any]
PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["Client", "Pin"]


class Pin:
    """A prefix pinned in the server's arena: its bytes cannot be evicted until released.

    Made by :meth:`Client.pin`. Use it as a context manager, which releases it
    on exit (``release()`` does it earlier; the lease also runs out after 30 s
    by default, and dropping the object releases it)::

        with client.pin("mistral-7b", tokens) as p:
            if p.tokens:
                p.copy_to(out)           # into a numpy array or torch tensor
                kv = p.to_numpy()        # or a new array of shape layout.kv_shape(p.tokens)

    A miss gives a Pin with ``tokens == 0`` that holds nothing. The copies
    run with the GIL released; one Pin may be used from several threads.
    """

    def __init__(self, low: _ptstore.Pin, layout: Layout, namespace: str) -> None:
        self._p = low
        self._layout = layout
        self._namespace = namespace

    @property
    def tokens(self) -> int:
        """Tokens pinned: whole blocks from the start of the prompt (0 on a miss)."""
        return self._p.tokens

    @property
    def bytes(self) -> int:
        """Bytes pinned (tokens * layout.bytes_per_token)."""
        return self._p.bytes

    @property
    def extents(self) -> List[Extent]:
        """The extents holding the prefix, in order, with their offsets in the arena."""
        return self._p.extents

    @property
    def pinned(self) -> bool:
        """True until released (False for a miss)."""
        return self._p.pinned

    @property
    def layout(self) -> Layout:
        """The namespace's layout."""
        return self._layout

    @property
    def namespace(self) -> str:
        """The namespace the prefix belongs to."""
        return self._namespace

    def copy_to(self, out: Any, tokens: Optional[int] = None) -> int:
        """Copies the pinned prefix (or its first `tokens` tokens) into `out`; returns the tokens copied.

        `out` is a writable numpy array or CPU torch tensor of the layout's
        dtype with room for them (see ptstore._arrays). The bytes go straight
        from the mapped arena into `out`. Raises InvalidArgument once the pin
        is released.
        """
        n = self.tokens if tokens is None else int(tokens)
        if n < 0 or n > self.tokens:
            raise InvalidArgument(f"cannot copy {n} tokens out of a pin of {self.tokens}")
        buf = kv_buffer(out, self._layout, what="out", writable=True)
        if buf.tokens < n:
            raise InvalidArgument(f"out holds {buf.tokens} tokens, the pinned prefix {n}: give an out of at least "
                                  f"{n} tokens (shape {shape_of(self._layout, n)})")
        self._p.copy_to_address(buf.address, n * self._layout.bytes_per_token)
        return n

    def to_numpy(self) -> np.ndarray:
        """A new numpy array holding the pinned prefix, shaped ``layout.kv_shape(tokens)`` (bf16 as uint16 bits)."""
        out = empty_kv(self._layout, self.tokens, "numpy")
        self.copy_to(out)
        return out

    def to_torch(self) -> Any:
        """A new CPU torch tensor holding the pinned prefix, shaped ``layout.kv_shape(tokens)``."""
        out = empty_kv(self._layout, self.tokens, "torch")
        self.copy_to(out)
        return out

    def release(self) -> None:
        """Unpins now (a second call does nothing)."""
        self._p.release()

    def __enter__(self) -> "Pin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return (f"Pin(namespace={self._namespace!r}, tokens={self.tokens}, bytes={self.bytes}, "
                f"extents={len(self.extents)}, pinned={self.pinned})")


class Client:
    """A client of the local ptstored (libptstore's ``ptstore::Client``).

    Args:
        socket: the server's unix socket; None: ``$PTSTORE_SOCKET``, else
            ``/run/ptstore/ptstored.sock``.
        client_name: shown in the server's log.
        want_mapping: ask for the zero-copy arena mapping (granted to clients
            the server trusts with every namespace; the others load by copy).
        rpc_timeout_ms: deadline of one request (DeadlineExceeded after it).
        max_connections: connections opened for concurrent callers.
        staging_bytes: initial size of each connection's staging buffer.
        copy_threads: threads a large load or save copy is split over (0:
            the CPUs this process may use, at most 8, or
            ``$PTSTORE_COPY_THREADS``; never more than are idle at the time;
            1: the calling thread only).

    Raises Unavailable when no server listens there.

    Thread safety: one Client may be used from many Python threads at once;
    every call that talks to the server or copies KV bytes releases the GIL,
    so their requests and copies run in parallel (up to max_connections).

    KV buffers are numpy arrays or CPU torch tensors of the namespace's
    dtype, shaped ``(tokens, layers, 2, kv_heads, head_dim)`` (see
    :meth:`Layout.kv_shape`); token ids are any 1-D integer sequence. Only
    whole blocks of ``block_tokens`` tokens count: a partial last block is
    ignored, never an error. A cache miss is not an error either: ``load``
    returns 0.
    """

    def __init__(self, socket: Optional[PathLike] = None, *, client_name: str = "python", want_mapping: bool = True,
                 rpc_timeout_ms: int = 30000, max_connections: int = 4, staging_bytes: int = 16 << 20,
                 copy_threads: int = 0) -> None:
        self._c = _ptstore.Client(os.fspath(socket) if socket is not None else None, client_name, want_mapping,
                                  rpc_timeout_ms, max_connections, staging_bytes, copy_threads)
        self._layouts: Dict[str, Layout] = {}

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Closes the connections. Pins already taken stay valid until released."""
        self._c.close()

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._c.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def socket(self) -> str:
        """The socket given to the constructor ('' for the default)."""
        return self._c.socket

    @property
    def mapped(self) -> bool:
        """True when loads copy straight out of the server's arena, mapped into this process."""
        return self._c.mapped

    @property
    def node_id(self) -> int:
        """The server's node id."""
        return self._c.node_id

    @property
    def arena_id(self) -> int:
        """Which arena this client maps: the same in every client of one ptstored, another after it restarted;
        0 without the mapping. Extent.arena_offset values are offsets in it."""
        return self._c.arena_id

    def copy_from_arena(self, pieces: Any, out: Any) -> int:
        """Copies pieces of the mapped arena into `out`; returns the bytes copied.

        `pieces` is an (n, 3) integer array of (arena offset, bytes, byte offset in `out`), e.g. parts of the
        extents of a :class:`Pin` of this client or of another client with the same :attr:`arena_id`, which
        must keep them pinned until this returns. `out` is a writable C-contiguous numpy array or CPU torch
        tensor of any dtype (offsets are in bytes). Raises PermissionDenied without the mapping and
        InvalidArgument for a piece outside the arena or `out` (then nothing is copied).
        """
        arr = np.asarray(pieces, dtype=np.uint64)
        if arr.size == 0:
            arr = arr.reshape(0, 3)
        if arr.ndim != 2 or arr.shape[1] != 3:
            raise InvalidArgument(f"pieces must be an (n, 3) array of (arena offset, bytes, offset in out), got "
                                  f"shape {arr.shape}")
        arr = np.ascontiguousarray(arr)
        address, nbytes = raw_buffer(out, what="out", writable=True)
        self._c.copy_from_arena(arr, address, nbytes)
        return int(arr[:, 1].sum()) if len(arr) else 0

    def __repr__(self) -> str:
        if self._c.closed:
            return "Client(closed)"
        return f"Client(socket={self.socket or '<default>'!r}, node_id={self.node_id}, mapped={self.mapped})"

    # ---------------------------------------------------------- namespaces
    def create_namespace(self, name: str, layout: Layout, salt: Union[str, bytes] = "", mode: int = 0o755,
                         exist_ok: bool = True) -> NamespaceInfo:
        """Creates a namespace owned by this process's uid/gid.

        `salt` isolates tenants (different salt, different keys: no hits across
        them). With `exist_ok`, an existing namespace with the same layout and
        salt is returned as is; a different one is AlreadyExists.
        Raises InvalidArgument for a bad name (1..128 of [A-Za-z0-9._-]).
        """
        info = self._c.create_namespace(name, layout, salt, mode, exist_ok)
        self._layouts[name] = info.layout
        return info

    def get_namespace(self, name: str) -> NamespaceInfo:
        """The namespace `name` (NotFound if there is none)."""
        info = self._c.get_namespace(name)
        self._layouts[name] = info.layout
        return info

    def list_namespaces(self) -> List[NamespaceInfo]:
        """Every namespace of the node."""
        return self._c.list_namespaces()

    def drop_namespace(self, name: str) -> RemoveResult:
        """Removes a namespace and everything in it (NotFound if there is none)."""
        self._layouts.pop(name, None)
        return self._c.drop_namespace(name)

    def layout(self, ns: str) -> Layout:
        """The layout of namespace `ns` (asked once, then cached; NotFound if there is none)."""
        layout = self._layouts.get(ns)
        if layout is None:
            layout = self.get_namespace(ns).layout
        return layout

    # ------------------------------------------------------------ prefixes
    def save(self, ns: str, tokens: TokensLike, kv: Any) -> SaveResult:
        """Saves the KV of the whole blocks of `tokens`; stores only the blocks not stored yet.

        `kv` holds the KV of the prompt: a numpy array or CPU torch tensor of
        the layout's dtype whose first dimension is either ``len(tokens)`` or
        its whole-block part (the KV of a partial last block is not stored).
        """
        layout = self.layout(ns)
        toks = as_tokens(tokens)
        buf = kv_buffer(kv, layout, what="kv", writable=False)
        whole = layout.whole_tokens(len(toks))
        if buf.tokens not in (whole, len(toks)):
            raise InvalidArgument(
                f"kv holds {buf.tokens} tokens, but the {len(toks)} tokens given have {whole} tokens of whole "
                f"blocks ({layout.block_tokens} tokens per block): expected a kv of {whole}"
                + ("" if whole == len(toks) else f" or {len(toks)}") + f" tokens, shape {shape_of(layout, whole)}")
        return self._call(ns, self._c.save, ns, toks, buf.address, whole * layout.bytes_per_token)

    def lookup(self, ns: str, tokens: TokensLike) -> LookupResult:
        """The longest stored prefix of `tokens`: matched tokens (0 on a miss) and its extents. No pin, no hit."""
        return self._call(ns, self._c.lookup, ns, as_tokens(tokens))

    def locate_prefix(self, ns: str, tokens: TokensLike) -> PrefixLocation:
        """Where the longest match of `tokens` is in the cluster: a :class:`PrefixLocation`.

        ``matched_tokens`` (whole blocks; 0 on a miss) and ``spans``, a list of
        ``(end_token, owner, nodes)`` in order; ``held_by(node)`` is how many
        tokens from the start `node` holds (``held_by(client.node_id)``: what
        loads without asking another node). No pin, no hit counted. Raises
        NotFound when there is no namespace `ns`.
        """
        return self._call(ns, self._c.locate_prefix, ns, as_tokens(tokens))

    def advise(self, ns: str, tokens: TokensLike, cost_model: CostModel, remote_path: str = "rma",
               gpu_tokens: int = 0) -> LoadPlan:
        """Load or recompute? The :class:`LoadPlan` of `cost_model` for the prompt `tokens`.

        Asks the node where the prompt's prefix is (as :meth:`locate_prefix`)
        and plans: the tokens this node holds load over ``"dram"``, the rest
        of the cluster's match over `remote_path` (``"rma"`` or ``"tcp"``, as
        the cluster's data path is). Load tokens ``[0, plan.load_tokens)``
        and recompute the rest; ``load_tokens == 0`` means recompute all of
        it. A miss, or no namespace `ns`, plans a full recompute (never an
        error). `gpu_tokens`: the prompt's first tokens already in GPU memory
        (an engine's own prefix cache): only what lies past them is worth a
        transfer, and the plan's ``load_tokens`` is then at least
        `gpu_tokens` (equal: nothing to load). The request runs with the GIL
        released.
        """
        if gpu_tokens < 0:
            raise ValueError(f"gpu_tokens must be >= 0, got {gpu_tokens}")
        return self._c.advise(ns, as_tokens(tokens), cost_model, remote_path, int(gpu_tokens))

    def load(self, ns: str, tokens: TokensLike, out: Any) -> int:
        """Loads the longest stored prefix of `tokens` into `out`; returns the tokens loaded (0 on a miss).

        `out` is a writable numpy array or CPU torch tensor of the layout's
        dtype with room for the whole-block part of `tokens` (pass
        ``tokens[:n]`` to load at most n). The bytes are copied straight from
        the server's arena (mapped into this process) into `out`, with the GIL
        released; tokens past the loaded prefix are left as they were.
        """
        layout = self.layout(ns)
        toks = as_tokens(tokens)
        buf = kv_buffer(out, layout, what="out", writable=True)
        whole = layout.whole_tokens(len(toks))
        if buf.tokens < whole:
            raise InvalidArgument(
                f"out holds {buf.tokens} tokens, but the {len(toks)} tokens given have {whole} tokens of whole "
                f"blocks ({layout.block_tokens} tokens per block): give an out of at least {whole} tokens "
                f"(shape {shape_of(layout, whole)}), or pass tokens[:{buf.tokens}]")
        return self._call(ns, self._c.load, ns, toks, buf.address, buf.tokens * layout.bytes_per_token)

    def load_path(self, path: PathLike, out: Any) -> int:
        """Loads the prefix that ends at `path`, an increment directory of a PTStore mount, into `out`.

        Uses the mount's ioctl (no read(2) of kv files): asks what the path is,
        pins the prefix, copies it out of this client's arena mapping, unpins.
        The mount must front this client's ptstored. Returns the tokens loaded
        (0 for a namespace or the root). `out` must have room for the whole
        prefix (``path_info(path).prefix_tokens`` tokens) in the namespace's
        dtype.
        """
        p = os.fspath(path)
        info = _ptstore.path_info(p)
        if info.kind != "increment" or info.layout is None:
            return 0
        buf = kv_buffer(out, info.layout, what="out", writable=True)
        if buf.tokens < info.prefix_tokens:
            raise InvalidArgument(
                f"the prefix at {p} holds {info.prefix_tokens} tokens, out only {buf.tokens}: give an out of "
                f"shape {shape_of(info.layout, info.prefix_tokens)}")
        return self._c.load_path(p, buf.address, buf.tokens * info.layout.bytes_per_token)

    def pin(self, ns: str, tokens: TokensLike) -> Pin:
        """Pins the longest stored prefix of `tokens` (see :class:`Pin`; use it in a ``with`` block).

        Needs the arena mapping (PermissionDenied otherwise). A miss gives a
        Pin with ``tokens == 0``.
        """
        layout = self.layout(ns)
        return Pin(self._call(ns, self._c.pin, ns, as_tokens(tokens)), layout, ns)

    def pin_increment(self, ns: str, key: str, whole_prefix: bool = False) -> Pin:
        """Pins one increment by its chain key (32 hex digits), or with `whole_prefix` the prefix ending at it."""
        layout = self.layout(ns)
        return Pin(self._call(ns, self._c.pin_increment, ns, key, whole_prefix), layout, ns)

    def remove(self, ns: str, tokens: TokensLike) -> RemoveResult:
        """Removes the increment holding the last whole block of `tokens` and everything below it."""
        return self._call(ns, self._c.remove, ns, as_tokens(tokens))

    def remove_key(self, ns: str, key: str) -> RemoveResult:
        """Removes the increment with chain key `key` and everything below it."""
        return self._call(ns, self._c.remove_key, ns, key)

    # --------------------------------------------------------- inspection
    def stats(self) -> Stats:
        """The node's counters (``Stats``; ``.to_dict()`` for a dict)."""
        return self._c.stats()

    def list_tree(self, ns: str, parent: Optional[str] = None, recursive: bool = False) -> List[PrefixNode]:
        """The increments below `parent` (a chain key; None: the namespace's root), all levels with `recursive`."""
        return self._call(ns, self._c.list_tree, ns, parent or "", recursive)

    def get_increment(self, ns: str, key: str) -> Increment:
        """One increment by chain key, with its own token ids (NotFound if it is gone)."""
        return self._call(ns, self._c.get_increment, ns, key)

    def set_times(self, ns: str, key: str, atime_ns: int = 0, mtime_ns: int = 0) -> PrefixNode:
        """Sets an increment's atime and/or mtime (ns since the epoch; 0 leaves one as it is), as touch(1) does.

        A later atime is also its ancestors' (a use of an increment uses its prefix); its ctime becomes now.
        Needs write permission on the namespace. Returns its PrefixNode afterwards.
        """
        return self._call(ns, self._c.set_times, ns, key, atime_ns, mtime_ns)

    # -------------------------------------------------------------- quotas
    def set_quota(self, ns: str, dram: Union[int, str, None] = None,
                  ssd: Union[int, str, None] = None) -> NamespaceQuota:
        """Sets the namespace's DRAM and/or SSD quota on this node; None leaves that tier as it is.

        A quota is an int of bytes or a text such as ``"4GiB"`` or ``"512MB"`` (``parse_quota``); 0 or
        ``"none"`` is no limit. Only the namespace's owner or root may (PermissionDenied naming it
        otherwise); a bad size is InvalidArgument. Over its DRAM quota the namespace evicts its own
        increments (to SSD where there is a tier), never another namespace's. Returns the quotas and use
        afterwards.
        """
        return self._c.set_quota(ns, dram, ssd)

    def quota(self, ns: str) -> NamespaceQuota:
        """The namespace's quotas and what counts against them on this node."""
        return self._c.quotas(ns)[0]

    def quotas(self) -> List[NamespaceQuota]:
        """Every namespace's quotas and use on this node."""
        return self._c.quotas("")

    # ------------------------------------------------------------ helpers
    def _call(self, ns: str, fn: Any, *args: Any) -> Any:
        # A namespace dropped (and maybe re-created with another layout) by
        # another client makes the cached layout stale: forget it on the
        # errors that can mean that.
        try:
            return fn(*args)
        except (NotFound, InvalidArgument):
            self._layouts.pop(ns, None)
            raise
