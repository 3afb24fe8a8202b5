"""Fuzz the sans-I/O MQTT codec: `python -m bench.fuzz_codec --cases N --seed S`.

Each case (bench/fuzz_cases.py) is a valid packet of some type, level and direction, mutated, cut into reads and
fed to a decoder in the packet's context. The codec may answer bad input only with its documented errors (the
`RemoteProtocolError` family, docs/mqtt-codec.md); any other exception is a crash. Each case is bounded (at most
MAX_CASE_BYTES bytes, a bounded drain loop) and timed: a case slower than `--hang-seconds` is a hang, and one
still running after ten times that is interrupted (SIGALRM) and reported as a hang too.

Every packet the decoder does accept is encoded again and decoded again: a `LocalProtocolError` or a different
packet there is an asymmetry between decoder and encoder (reported, not a crash).

    python -m bench.fuzz_codec --cases 1000000 --seed 1          # the documented run (docs/security.md)
    python -m bench.fuzz_codec --seed 1 --replay 4711             # one case again, with its traceback
    python -m bench.fuzz_codec --engine atheris --cases 200000    # coverage-guided (atheris), same oracle

Exit status 1 if a crash or a hang was found.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from bench.fuzz_cases import SEEDS, Case, Seed, case_rng, make_case
from vmqpy.mqtt.codec import Decoder, NeedData, encode
from vmqpy.mqtt.decoder import LongSubscribe
from vmqpy.mqtt.errors import LocalProtocolError, RemoteProtocolError
from vmqpy.mqtt.packets import Packet

EXPECTED = RemoteProtocolError
"""What the decoder may raise for bad input (MalformedPacket, ProtocolViolation, PacketTooLarge,
UnsupportedProtocolVersion and RemoteProtocolError itself)."""


class CaseTimeout(BaseException):
    """A case ran past its alarm (not an Exception: the code under test must not swallow it)."""


def decoder_for(seed: Seed, max_packet_size: int) -> Decoder:
    """A decoder in the seed's context: a fresh server for a CONNECT, a connected server for other client
    packets, a client for server packets."""
    if seed.is_connect:
        return Decoder(server=True, max_packet_size=max_packet_size)
    return Decoder(server=seed.to_server, protocol_level=seed.level, max_packet_size=max_packet_size)


def drain(decoder: Decoder, chunks: tuple[bytes, ...]) -> list[Packet]:
    """Feed every chunk and take out every complete packet; stops at the first protocol error (raised)."""
    packets: list[Packet] = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        for _ in range(len(chunk) + 2):  # each packet takes at least 2 bytes
            packet = decoder.next_packet()
            if isinstance(packet, NeedData):
                break
            assert not isinstance(packet, LongSubscribe)  # long_subscribe is off: decoded whole
            packets.append(packet)
        else:
            raise AssertionError("the decoder returned more packets than its input can hold")
    return packets


def roundtrip_problem(seed: Seed, level: int, packet: Packet) -> str | None:
    """None if `packet` encodes at `level` and decodes back to itself in the same context, else what went wrong."""
    try:
        wire = encode(packet, level)
    except LocalProtocolError as e:
        return f"decoded {type(packet).__name__} does not encode: {e}"
    if packet.type == 1:  # CONNECT
        again = Decoder(server=True)
    else:
        again = Decoder(server=seed.to_server, protocol_level=level)
    try:
        back = drain(again, (wire,))
    except RemoteProtocolError as e:
        return f"re-encoded {type(packet).__name__} is refused: {e}"
    if back != [packet]:
        return f"re-encoded {type(packet).__name__} decodes to {back!r}, not {packet!r}"
    return None


@dataclass
class Outcome:
    """What one case did: the error it ended with (None: it was accepted) and any round-trip problem."""

    error: RemoteProtocolError | None
    packets: int
    asymmetry: str | None


def run_case(case: Case) -> Outcome:
    """Run one case; raises whatever the codec raises that is not a protocol error (a crash)."""
    decoder = decoder_for(case.seed, case.max_packet_size)
    packets: list[Packet] = []
    error: RemoteProtocolError | None = None
    try:
        packets = drain(decoder, case.chunks)
    except EXPECTED as e:
        error = e
        try:  # a dead decoder raises the same error again and ignores new bytes
            decoder.receive_data(b"\x00\x00")
            decoder.next_packet()
        except EXPECTED as again:
            if again is not e:
                raise AssertionError("a dead decoder raised a different error") from None
        else:
            raise AssertionError("a decoder that raised went on decoding")
    asymmetry = None
    level = decoder.protocol_level
    for packet in packets:
        if level is not None:
            asymmetry = roundtrip_problem(case.seed, level, packet)
            if asymmetry:
                break
    return Outcome(error, len(packets), asymmetry)


@dataclass
class Finding:
    index: int
    seed: str
    mutators: tuple[str, ...]
    wire: bytes
    what: str

    def line(self, run_seed: int) -> str:
        return (f"case {self.index} (replay: --seed {run_seed} --replay {self.index}) seed={self.seed} "
                f"mutators={'+'.join(self.mutators)} {self.what}\n    bytes={self.wire[:96].hex()}"
                + ("..." if len(self.wire) > 96 else ""))


@dataclass
class Report:
    run_seed: int
    cases: int = 0
    seconds: float = 0.0
    crashes: list[Finding] = field(default_factory=list)
    hangs: list[Finding] = field(default_factory=list)
    asymmetries: list[Finding] = field(default_factory=list)
    asymmetry_count: int = 0
    slowest: tuple[float, int, str] = (0.0, -1, "")
    outcomes: Counter[str] = field(default_factory=Counter)
    bytes_fed: int = 0

    @property
    def rate(self) -> float:
        return self.cases / self.seconds if self.seconds else 0.0

    def text(self) -> str:
        lines = [
            f"seed {self.run_seed}: {self.cases} cases in {self.seconds:.1f} s ({self.rate:,.0f} cases/s), "
            f"{self.bytes_fed:,} bytes fed",
            f"crashes (exceptions other than the codec's protocol errors): {len(self.crashes)}",
            f"hangs (a case above the bound): {len(self.hangs)}",
            f"slowest case: {self.slowest[0] * 1000:.2f} ms (case {self.slowest[1]}, seed {self.slowest[2]})",
            f"decoder/encoder asymmetries: {self.asymmetry_count}",
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common()),
        ]
        for title, found in (("CRASH", self.crashes), ("HANG", self.hangs), ("ASYMMETRY", self.asymmetries)):
            lines += [f"{title} {f.line(self.run_seed)}" for f in found[:10]]
        return "\n".join(lines)


@contextmanager
def alarm_on(hang_seconds: float) -> Iterator[None]:
    """SIGALRM raises CaseTimeout while active (`fuzz` arms it per case with setitimer); an outer timer is kept."""

    def ring(signum: int, frame: FrameType | None) -> None:
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, ring)
    outer, _ = signal.getitimer(signal.ITIMER_REAL)  # a timer someone else set (pytest-timeout's, say)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # give it back, less the time spent here
            signal.setitimer(signal.ITIMER_REAL, max(0.001, outer - (time.monotonic() - started)))


def fuzz(cases: int, run_seed: int, hang_seconds: float = 1.0, max_minutes: float | None = None,
         progress: bool = True) -> Report:
    """Run up to `cases` cases (fewer if `max_minutes` runs out first); the report says how many ran."""
    report = Report(run_seed)
    limit = hang_seconds * 10
    started = time.perf_counter()
    deadline = started + max_minutes * 60 if max_minutes else None
    next_note = started + 10
    with alarm_on(limit):
        for index in range(cases):
            case = make_case(case_rng(run_seed, index))
            t0 = time.perf_counter()
            try:
                signal.setitimer(signal.ITIMER_REAL, limit)
                outcome = run_case(case)
                signal.setitimer(signal.ITIMER_REAL, 0)
            except CaseTimeout:
                outcome = None
                report.hangs.append(Finding(index, case.seed.name, case.mutators, case.wire, f"over {limit} s"))
            except Exception as e:  # a crash: anything but the codec's protocol errors
                signal.setitimer(signal.ITIMER_REAL, 0)
                outcome = None
                report.crashes.append(Finding(index, case.seed.name, case.mutators, case.wire,
                                              f"{type(e).__name__}: {e}"))
            elapsed = time.perf_counter() - t0
            if elapsed > report.slowest[0]:
                report.slowest = (elapsed, index, case.seed.name)
            if elapsed > hang_seconds and outcome is not None:
                report.hangs.append(Finding(index, case.seed.name, case.mutators, case.wire, f"{elapsed:.2f} s"))
            if outcome is not None:
                report.outcomes[type(outcome.error).__name__ if outcome.error else "accepted"] += 1
                if outcome.asymmetry:
                    report.asymmetry_count += 1
                    if len(report.asymmetries) < 20:
                        report.asymmetries.append(Finding(index, case.seed.name, case.mutators, case.wire,
                                                          outcome.asymmetry))
            report.cases = index + 1
            report.bytes_fed += len(case.wire)
            if index & 1023 == 0:
                now = time.perf_counter()
                if progress and now >= next_note:
                    next_note = now + 30
                    print(f"  {index + 1} cases, {(index + 1) / (now - started):,.0f}/s, "
                          f"crashes {len(report.crashes)}, hangs {len(report.hangs)}", flush=True)
                if deadline is not None and now >= deadline:
                    break
    report.seconds = time.perf_counter() - started
    return report


def replay(run_seed: int, index: int) -> int:
    case = make_case(case_rng(run_seed, index))
    print(f"case {index} of seed {run_seed}: seed packet {case.seed.name}, mutators {'+'.join(case.mutators)}, "
          f"max_packet_size {case.max_packet_size}\n  chunks: {[c.hex() for c in case.chunks]}")
    try:
        outcome = run_case(case)
    except Exception:
        traceback.print_exc()
        return 1
    print(f"  outcome: {outcome.error!r} after {outcome.packets} packet(s); asymmetry: {outcome.asymmetry}")
    return 0


# -- atheris: coverage-guided, same oracle ----------------------------------------------------------------------
def atheris_main(cases: int, run_seed: int) -> int:
    """Coverage-guided fuzzing with atheris (if installed): the first input byte picks the seed context (level,
    direction, maximum packet size), the rest is the byte stream, cut where the second byte says."""
    try:
        import atheris  # type: ignore[import-untyped, import-not-found, unused-ignore]  # optional
    except ImportError:
        print("atheris is not installed (pip install atheris); use the default engine", file=sys.stderr)
        return 2
    atheris.instrument_all()  # the codec is imported already (bench.fuzz_cases builds its seeds with it)

    def one_input(data: bytes) -> None:
        if len(data) < 3:
            return
        seed = SEEDS[data[0] % len(SEEDS)]
        cut = data[1] % (len(data) - 1) + 2
        chunks = tuple(c for c in (data[2:cut], data[cut:]) if c)
        case = Case(seed, data[2:], chunks, (268_435_460, 65_536, 64)[data[0] // len(SEEDS) % 3], ("atheris",))
        outcome = run_case(case)
        if outcome.asymmetry:
            pass  # reported by the default engine; atheris stops only on crashes

    corpus = Path(tempfile.mkdtemp(prefix="fuzz-codec-corpus-"))
    for i, seed in enumerate(SEEDS):
        (corpus / f"seed{i}").write_bytes(bytes((i, 0)) + seed.wire)
    print(f"atheris: seed {run_seed}, {cases} runs, corpus {corpus} ({len(SEEDS)} seed packets)", flush=True)
    atheris.Setup([sys.argv[0], f"-runs={cases}", f"-seed={run_seed}", "-max_len=4096", str(corpus)], one_input)
    atheris.Fuzz()  # exits the process; an uncaught exception is printed with its input and exits non-zero
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz_codec", description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=100_000, help="number of cases (default 100000)")
    parser.add_argument("--seed", type=int, default=None, help="run seed (default: random, printed)")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long even if cases remain")
    parser.add_argument("--hang-seconds", type=float, default=1.0, help="a case slower than this is a hang")
    parser.add_argument("--replay", type=int, default=None, metavar="INDEX", help="run one case of --seed again")
    parser.add_argument("--engine", choices=("mutate", "atheris"), default="mutate")
    args = parser.parse_args(argv)
    run_seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    if args.replay is not None:
        return replay(run_seed, args.replay)
    if args.engine == "atheris":
        return atheris_main(args.cases, run_seed)
    print(f"fuzz_codec: seed {run_seed}, {args.cases} cases, {len(SEEDS)} seed packets, hang bound "
          f"{args.hang_seconds} s" + (f", at most {args.minutes} min" if args.minutes else ""), flush=True)
    report = fuzz(args.cases, run_seed, args.hang_seconds, args.minutes)
    print(report.text())
    return 1 if report.crashes or report.hangs else 0


if __name__ == "__main__":
    sys.exit(main())
