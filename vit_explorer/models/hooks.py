"""Named hook sites, in TransformerLens's convention: the one way into a forward pass.

A `HookPoint` is a place in the forward pass where a value can be read or replaced. Each module that owns one
declares it with its local name (`hook_resid_pre`, `attn.hook_pattern`, `ln1.hook_normalized`, ...); the model
names it in full by its module path (`blocks.3.attn.hook_pattern`) and lists them all in `hook_dict`.

A forward hook `fn(tensor, hook)` returns a replacement or None (keep); a backward hook `fn(grad, hook)` sees the
gradient at the site (and may return a replacement). `add_hook` adds a hook for every pass until `reset_hooks`;
`hooks()` and `run_with_hooks` add theirs for the passes the calling thread runs inside the block, so passes on one
model in several threads (the app's workers) never see each other's. At a site the model's own per-pass hooks run
first ([MASK], head masks), then those of `add_hook`, then those of `hooks()`. A site no thread hooks costs three
attribute reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

HookFn = Callable[[torch.Tensor, "HookPoint"], torch.Tensor | None]
NamesFilter = Callable[[str], bool] | Sequence[str] | str | None


_PASSES = threading.local()  # this thread's per-pass hooks: id(HookPoint) -> _Local
_COUNTING = threading.Lock()  # guards HookPoint.locals, changed by every thread


class _Local:
    """A site's hooks for the passes one thread runs: the model's own first, then the caller's."""

    def __init__(self) -> None:
        self.first: list[HookFn] = []
        self.fwd: list[HookFn] = []
        self.bwd: list[HookFn] = []

    def __bool__(self) -> bool:
        return bool(self.first or self.fwd or self.bwd)


def _table() -> dict[int, _Local]:
    table: dict[int, _Local] | None = getattr(_PASSES, "table", None)
    if table is None:
        table = _PASSES.table = {}
    return table


class HookPoint:
    """A site: identity until hooks are added. Not an nn.Module, so it is in no parameter tree and no state dict."""

    def __init__(self, local_name: str) -> None:
        self.local_name = local_name  # e.g. "attn.hook_pattern", relative to the module that owns it
        self.name = local_name  # the full name, set by the model (`name_hooks`)
        self.fwd: list[HookFn] = []  # add_hook's: every pass, in every thread
        self.bwd: list[HookFn] = []
        self.locals = 0  # threads with a per-pass entry here: 0 lets a pass skip the per-thread lookup

    def _local(self) -> _Local | None:
        if not self.locals:  # no thread has hooks here (most sites of most passes): no thread-local lookup
            return None
        table: dict[int, _Local] | None = getattr(_PASSES, "table", None)
        return None if table is None else table.get(id(self))

    def local(self) -> _Local:
        """This thread's per-pass hooks here (created empty)."""
        table = _table()
        entry = table.get(id(self))
        if entry is None:
            entry = table[id(self)] = _Local()
            with _COUNTING:
                self.locals += 1
        return entry

    def drop_local(self) -> None:
        """Forget this thread's per-pass entry once it is empty (so an idle site stays inactive)."""
        table = _table()
        entry = table.get(id(self))
        if entry is not None and not entry:
            del table[id(self)]
            with _COUNTING:
                self.locals -= 1

    @property
    def active(self) -> bool:
        return bool(self.fwd or self.bwd or self._local())

    @property
    def has_backward(self) -> bool:
        local = self._local()
        return bool(self.bwd or (local and local.bwd))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.locals or self.fwd or self.bwd):  # nobody listens: a few attribute reads
            return x
        local = self._local()
        if not (self.fwd or self.bwd or local):
            return x
        fwd = [*local.first, *self.fwd, *local.fwd] if local else list(self.fwd)
        for fn in fwd:
            replaced = fn(x, self)
            if replaced is not None:
                x = replaced
        bwd = [*self.bwd, *local.bwd] if local else self.bwd
        if bwd and x.requires_grad:
            for fn in bwd:
                x.register_hook(partial(_backward, fn, self))  # type: ignore[no-untyped-call]
        return x

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


def _backward(fn: HookFn, hook: HookPoint, grad: torch.Tensor) -> torch.Tensor | None:
    return fn(grad, hook)


def hook_points(module: torch.nn.Module) -> Iterator[tuple[str, HookPoint]]:
    """Every site of a module tree, by its full name: the owner's module path, then the site's local name."""
    for path, owner in module.named_modules():
        for value in vars(owner).values():
            if isinstance(value, HookPoint):
                yield (f"{path}.{value.local_name}" if path else value.local_name), value


def _matcher(names_filter: NamesFilter) -> Callable[[str], bool]:
    if names_filter is None:
        return lambda name: True
    if isinstance(names_filter, str):
        return lambda name: name == names_filter
    if callable(names_filter):
        return names_filter
    wanted = set(names_filter)
    return lambda name: name in wanted


class HookedMixin:
    """`run_with_cache`, `run_with_hooks`, `add_hook`, `reset_hooks` and `hook_dict` for a model whose forward
    calls its sites. The model calls `name_hooks()` once its modules exist."""

    hook_dict: dict[str, HookPoint]

    def name_hooks(self) -> None:
        assert isinstance(self, torch.nn.Module)
        self.hook_dict = dict(hook_points(self))
        for name, point in self.hook_dict.items():
            point.name = name

    def hook_names(self) -> list[str]:
        """Every site of this model, in forward order within each block."""
        return list(self.hook_dict)

    def _site(self, name: str) -> HookPoint:
        try:
            return self.hook_dict[name]
        except KeyError:
            close = [n for n in self.hook_dict if n.rsplit(".", 1)[-1] == name.rsplit(".", 1)[-1]][:4]
            hint = f"; e.g. {', '.join(close)}" if close else ""
            raise KeyError(f"this model has no hook site {name!r}{hint} (hook_names() lists them)") from None

    def add_hook(self, name: str | Callable[[str], bool], fn: HookFn, dir: str = "fwd") -> None:
        """Add fn at a site (or every site whose name the callable accepts) until `reset_hooks`."""
        if dir not in ("fwd", "bwd"):
            raise ValueError(f"dir must be 'fwd' or 'bwd', got {dir!r}")
        for point in self._points(name):
            (point.fwd if dir == "fwd" else point.bwd).append(fn)

    def reset_hooks(self) -> None:
        for point in self.hook_dict.values():
            point.fwd.clear()
            point.bwd.clear()

    def _points(self, name: str | Callable[[str], bool]) -> list[HookPoint]:
        return [self._site(name)] if isinstance(name, str) else [p for n, p in self.hook_dict.items() if name(n)]

    @contextmanager
    def hooks(self, fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
              bwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (), *,
              first: bool = False) -> Iterator[Any]:
        """The hooks added for the passes this thread runs inside the block (removed however it ends). first: run
        them before every other hook at their sites (the model's own per-pass edits: [MASK], head masks)."""
        added: list[tuple[HookPoint, list[HookFn], HookFn]] = []
        try:
            for hooks, direction in ((fwd_hooks, "fwd"), (bwd_hooks, "bwd")):
                for name, fn in hooks:
                    for point in self._points(name):
                        local = point.local()
                        target = local.bwd if direction == "bwd" else local.first if first else local.fwd
                        target.append(fn)
                        added.append((point, target, fn))
            yield self
        finally:
            for point, target, fn in added:
                target.remove(fn)
                point.drop_local()

    def run_with_hooks(self, pixel_values: torch.Tensor, *args: Any,
                       fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
                       bwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
                       **forward_kwargs: Any) -> torch.Tensor:
        """The model's output (logits) with the hooks in place for this one pass."""
        assert isinstance(self, torch.nn.Module)
        with self.hooks(fwd_hooks, bwd_hooks):
            out: torch.Tensor = self(pixel_values, *args, **forward_kwargs)
        return out

    def run_with_cache(self, pixel_values: torch.Tensor, *args: Any, names_filter: NamesFilter = None,
                       detach: bool = True, **forward_kwargs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(logits, cache): the value at every site the filter accepts (default: all), by full name. detach=False
        keeps the values in the autograd graph."""
        assert isinstance(self, torch.nn.Module)
        accept = _matcher(names_filter)
        cache: dict[str, torch.Tensor] = {}

        def keep(x: torch.Tensor, hook: HookPoint) -> None:
            cache[hook.name] = x.detach() if detach else x

        names = [name for name in self.hook_dict if accept(name)]
        out = self.run_with_hooks(pixel_values, *args, fwd_hooks=[(name, keep) for name in names], **forward_kwargs)
        return out, cache
