"""Numbers, sizes, durations and times written for people: what the command line prints and
the dashboard shows, in one place so that both say the same."""

from __future__ import annotations

from datetime import UTC, datetime


def figure(value: float) -> str:
    """A number a handler reported (its progress) for people: a whole one as it is (3,
    1200); any other to 3 significant digits, but with every digit of its integer part
    (0.0833, 12.3, 1235), not the 17 of 1/12 in full; past 10^15, 3 digits (2e+20)."""
    value = float(value)
    if abs(value) >= 1e15:
        return f"{value:.3g}"
    if value.is_integer():
        return str(int(value))
    return f"{value:.{max(3, len(str(int(abs(value)))))}g}"


def byte_size(n: int) -> str:
    """1234567 -> '1.2 MiB'."""
    if n < 1024:
        return f"{n} bytes"
    size = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{size:.1f} {unit}"


def span(seconds: float) -> str:
    """A duration for people: 0.4s, 12s, 4m05s, 3h04m, 2d03h; 7d, 1h, 5m when even."""
    seconds = abs(seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    for unit, size, small, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if whole >= size:
            rest = whole % size // small_size
            return f"{whole // size}{unit}" + (f"{rest:02d}{small}" if rest else "")
    rest = whole % 60
    return f"{whole // 60}m" + (f"{rest:02d}s" if rest else "")


def moment(t: float | None, now: float) -> str:
    """A Unix time for people: '2024-05-01 12:00:00 UTC (in 29s)'; '-' for None.
    Past the year 9999 (times go up to 10**12), the seconds as they are."""
    if t is None:
        return "-"
    try:
        stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):
        stamp = f"Unix time {t:.0f} (after the year 9999)"
    relative = f"in {span(t - now)}" if t > now else f"{span(now - t)} ago"
    return f"{stamp} ({relative})"


def relative(t: float | None, now: float) -> str:
    """A Unix time relative to ``now`` only: 'in 29s', '3m05s ago'; '-' for None."""
    if t is None:
        return "-"
    return f"in {span(t - now)}" if t > now else f"{span(now - t)} ago"
