"""Pickle protocol 4 and 5 rewritten as protocol 2, so `torch.load(weights_only=True)` reads them.

torch's weights-only unpickler knows only the opcodes of protocols 0-3; a state dict saved with
`torch.save(..., pickle_protocol=4)` (or by a tool that defaults to 5) is refused as "Unsupported
operand 149" (FRAME). The rewrite only re-encodes opcodes, never executes anything: FRAME is
dropped, MEMOIZE becomes BINPUT, strings become BINUNICODE, and STACK_GLOBAL (module and name
from the stack) becomes GLOBAL (module and name inline). torch's own unpickler then judges the
result, with its allow-list, exactly as it judges any other file.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct
from typing import IO, BinaryIO, cast

_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_GETS = {"BINGET", "LONG_BINGET", "GET"}
_PUTS = {"BINPUT", "LONG_BINPUT", "PUT"}


def protocol(head: bytes) -> int:
    """The protocol of a pickle from its first bytes (PROTO n); 0 or 1 have no PROTO opcode."""
    return head[1] if len(head) >= 2 and head[0] == pickle.PROTO[0] else 0


class _Recorder:
    """A reader that keeps what it read, so each opcode's original bytes can be copied."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream, self.data = stream, bytearray()

    def read(self, n: int = -1) -> bytes:
        chunk = self.stream.read(n)
        self.data += chunk
        return chunk

    def readline(self) -> bytes:
        line = self.stream.readline()
        self.data += line
        return line

    def tell(self) -> int:
        return len(self.data)


def _string(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return pickle.BINUNICODE + struct.pack("<I", len(raw)) + raw


def _put(index: int) -> bytes:
    return pickle.BINPUT + bytes([index]) if index < 256 else pickle.LONG_BINPUT + struct.pack("<I", index)


def downgrade(stream: BinaryIO, limit: int) -> bytes:
    """Read one pickle from `stream` (up to STOP) and return it as protocol 2.

    Strings are held back until the next opcode shows whether STACK_GLOBAL consumes them; a
    memoised string is re-emitted as a literal wherever it is fetched again (strings are values),
    so dropping the pushes that STACK_GLOBAL consumed never leaves a memo slot undefined.
    ValueError if the input is not a pickle or the output would exceed `limit` bytes.
    """
    recorder = _Recorder(stream)
    out = bytearray(pickle.PROTO + b"\x02")
    pending: list[str] = []  # strings pushed but not yet written
    strings: dict[int, str] = {}  # memo slots that hold strings
    memo_size = 0

    def emit(name: str, arg: object, raw: bytes) -> None:
        nonlocal memo_size
        if name in ("PROTO", "FRAME"):
            return
        if name in _STRINGS:
            pending.append(str(arg))
            return
        if name in _GETS and arg in strings:
            pending.append(strings[int(arg)])
            return
        if name == "MEMOIZE" or name in _PUTS:
            index = memo_size if name == "MEMOIZE" else int(arg)  # type: ignore[call-overload]
            memo_size = max(memo_size, index + 1)
            if pending:
                strings[index] = pending[-1]  # the top of the stack is the newest pending string
            else:
                out.extend(_put(index))
            return
        if name == "STACK_GLOBAL":
            if len(pending) < 2:
                raise ValueError("STACK_GLOBAL without a module and a name on the stack")
            module, qualname = pending[-2:]
            del pending[-2:]
            if "\n" in module or "\n" in qualname:
                raise ValueError("a global's name contains a newline")
            raw = pickle.GLOBAL + f"{module}\n{qualname}\n".encode("utf-8", "surrogatepass")
        out.extend(b"".join(_string(s) for s in pending))
        pending.clear()
        out.extend(raw)
        if len(out) > limit:
            raise ValueError(f"the rewritten pickle would be larger than {limit} bytes")

    previous = None
    for op, arg, pos in pickletools.genops(cast(IO[bytes], recorder)):  # ValueError on anything that is not a pickle
        if previous is not None:
            emit(previous[0], previous[1], bytes(recorder.data[previous[2]:pos]))
        previous = (op.name, arg, pos)
    if previous is not None:
        emit(previous[0], previous[1], bytes(recorder.data[previous[2]:]))
    return bytes(out)


def downgrade_bytes(data: bytes, limit: int) -> bytes:
    return downgrade(io.BytesIO(data), limit)
