"""`vmq-admin trace client client-id=ID` (HTTP `/api/v1/trace/client`): the packets of one client connected to
this node, printed as they go, until the trace's time is up, its rate limit stops it, or Ctrl-C.

VerneMQ's option names: `--rate-max` packets per `--rate-interval` milliseconds (more stops the trace: a trace
must not become a load of its own), `--trunc-payload` bytes of each payload; `--stop-after` seconds bounds it in
time (VerneMQ's tracer runs until it is stopped). Like VerneMQ's, a trace is of the node asked: run it against
the node the client connects to (`vmq-admin session show --client_id=ID --node` says which).
"""

from __future__ import annotations

from admin.command import Command, Context
from admin.errors import CommandError
from admin.params import COUNT, SECONDS, TEXT, Args, Param
from admin.results import Lines, Result

MAX_STOP_AFTER = 3600.0  # seconds: the longest a trace may run


async def _client(ctx: Context, args: Args) -> Result:
    stop_after = args.number("stop-after")
    if not 0 < stop_after <= MAX_STOP_AFTER:
        raise CommandError(f"--stop-after must be more than 0 and at most {MAX_STOP_AFTER:g} seconds", 400)
    lines = ctx.facade.trace_client(
        args.text("client-id"), rate_max=args.integer("rate-max"), rate_interval=args.integer("rate-interval") / 1000,
        payload_limit=args.integer("trunc-payload"), stop_after=stop_after,
    )
    return Lines(lines)


def _wait(args: Args) -> float:
    return args.number("stop-after") + 30.0


COMMANDS: tuple[Command, ...] = (
    Command(("trace", "client"), "GET", "print the packets of a client connected to this node, as they go", _client,
            params=(Param("client-id", TEXT, required=True, help="the client to trace"),
                    Param("rate-max", COUNT, default=10, flag=True,
                          help="at most this many packets per --rate-interval; more stops the trace"),
                    Param("rate-interval", COUNT, default=100, flag=True, help="milliseconds"),
                    Param("trunc-payload", COUNT, default=200, flag=True, help="bytes of each payload shown"),
                    Param("stop-after", SECONDS, default=60.0, flag=True,
                          help="end the trace after this long (at most an hour)")),
            wait=_wait),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("trace", "client"): [
        "vmq-admin trace client client-id=sensor-17",
        "vmq-admin trace client client-id=sensor-17 --rate-max=100 --rate-interval=1000 --stop-after=300",
    ],
}

NOTES: dict[tuple[str, ...], str] = {}
