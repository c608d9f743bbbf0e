"""WorkQueue's lines: where AVAILABLE tasks wait for a claim (the ungrouped line, each
group's line and the heap of groups that may start a task) and WAITING ones for
their time (see sqlq/memory/layout.py)."""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from ..contract import Limit, Number
from ..rules import line_key
from .layout import (
    _AVAILABLE,
    _GROUP,
    _NO_LIMIT,
    _PRIORITY,
    _SEQ,
    _STATE,
    _UPDATED,
    _WAITING,
    _WHEN,
    Entry,
    Fields,
    Record,
    _Group,
)


class Lines(Fields):
    """Joining, leaving and taking the front of the lines; a group's slots."""

    def _unqueue(self, task_id: str, state: str) -> None:
        """Take an AVAILABLE task out of the line, or a WAITING one out of the heap of
        wake-ups (O(n): cancel and debounce)."""
        if state is _AVAILABLE:
            record = self._tasks[task_id]
            if record[_GROUP] is None:
                self._leave_line(task_id)
            else:
                self._leave_group_line(task_id, record[_GROUP])
        else:
            self._waiting = [entry for entry in self._waiting if entry[2] != task_id]
            heapq.heapify(self._waiting)

    def _make_available(self, task_id: str, record: Record, now: Number) -> None:
        record[_STATE] = _AVAILABLE
        record[_UPDATED] = now
        self._join_line(task_id, record)

    def _join_line(self, task_id: str, record: Record) -> None:
        """Put an AVAILABLE task in line at the call's time (an expiry or a wake-up
        too, as the database does), by its priority and the queue's aging (the one
        every task of this object was added with); its line position comes from the
        counter, as the database numbers it."""
        self._counter = seq = self._counter + 1
        priority = record[_PRIORITY]
        key = record[_WHEN] = line_key(self._now, priority, self.aging) if priority else self._now
        record[_SEQ] = seq
        if record[_GROUP] is not None:
            self._group_append(record[_GROUP], (key, seq, task_id))
            return
        line = self._line
        if priority == self._line_priority or not line:  # (no _others without a _line)
            self._line_priority = priority
            line.append(task_id)
            return
        others = self._others
        fifo = others.get(priority)
        if fifo is not None:
            fifo.append(task_id)
            return
        if not others:  # a second priority joins: the fronts are kept from now on
            self._fronts = [(*self._place(line[0]), self._line_priority)]
        others[priority] = deque((task_id,))
        heapq.heappush(self._fronts, (key, seq, priority))

    def _place(self, task_id: str) -> tuple[Number, int]:
        """An AVAILABLE task's place in the line: (line key, counter)."""
        record = self._tasks[task_id]
        return record[_WHEN], record[_SEQ]

    def _line_head(self) -> str:
        """The id at the front of the (ungrouped, not empty) line."""
        if not self._others:
            return self._line[0]
        priority = self._fronts[0][2]
        fifo = self._line if priority == self._line_priority else self._others[priority]
        return fifo[0]

    def _pop_line(self) -> str:
        """Take the front of the (ungrouped, not empty) line: its id."""
        others = self._others
        if not others:
            return self._line.popleft()
        fronts = self._fronts
        priority = fronts[0][2]
        fifo = self._line if priority == self._line_priority else others[priority]
        task_id = fifo.popleft()
        if fifo:
            heapq.heapreplace(fronts, (*self._place(fifo[0]), priority))
            return task_id
        heapq.heappop(fronts)
        if fifo is self._line:  # the next priority's FIFO takes its place
            self._line_priority = fronts[0][2]
            self._line = others.pop(self._line_priority)
        else:
            del others[priority]
        if not others:
            self._fronts = []
        return task_id

    def _leave_line(self, task_id: str) -> None:
        """Take an AVAILABLE task out of the (ungrouped) line (cancel, debounce): O(n)."""
        fifos = {self._line_priority: self._line, **self._others}
        for fifo in fifos.values():
            if task_id in fifo:
                fifo.remove(task_id)
        left = {priority: fifo for priority, fifo in fifos.items() if fifo}
        if left:  # the first FIFO left is the _line, the others stay _others
            self._line_priority = next(iter(left))
            self._line = left.pop(self._line_priority)
        self._others = left
        self._fronts = []
        if left:
            self._fronts = [(*self._place(fifo[0]), p) for p, fifo in fifos.items() if fifo]
            heapq.heapify(self._fronts)

    def _make_waiting(self, task_id: str, record: Record, run_at: Number, now: Number) -> None:
        self._counter += 1
        record[_STATE] = _WAITING
        record[_WHEN] = run_at
        record[_UPDATED] = now
        heapq.heappush(self._waiting, (run_at, self._counter, task_id))
        if run_at < self._due:
            self._due = run_at

    def _make_group(self, name: str) -> None:
        """A group's first task (or its first since purge forgot it): a new group,
        under the limits that apply to it."""
        self._groups[name] = _Group(self._limit_of(name))

    def _limit_of(self, group: str) -> Limit:
        """The limits that apply to ``group``: its own, else the queue's default."""
        return self._limits.get(group) or self._limits.get("") or _NO_LIMIT

    def _push(self, name: str, group: _Group) -> None:
        """Enter the group in the heap of groups that may start a task, if it may (by
        its front and its free slots; its rate is looked at when a claim pops it).
        Entries are never removed: one that no longer matches its group (its order
        moved, or it filled its slots) is dropped when it reaches the top."""
        if group.line and group.running < group.cap:  # rules.admits, written out
            heapq.heappush(self._ready, (*group.order(self.fair), name))

    def _ready_group(self, now: Number) -> str | None:
        """The first group (in line order, or round robin) that may start a task at
        ``now``; groups waiting out their rate are passed over and kept."""
        ready, groups = self._ready, self._groups
        passed: list[tuple[Any, ...]] = []
        found = None
        while ready:
            entry = ready[0]
            group = groups[entry[-1]]
            if not group.line or group.running >= group.cap or entry[:-1] != group.order(self.fair):
                heapq.heappop(ready)  # stale
            elif group.tat > now:
                passed.append(heapq.heappop(ready))
            else:
                found = entry[-1]
                break
        for entry in passed:
            heapq.heappush(ready, entry)
        return found

    def _front(self, now: Number) -> tuple[str, str | None] | None:
        """The task a claim at ``now`` takes, and its group: the front of the
        ungrouped line or of the first group that may start one, whichever is first
        in line; None if neither has one."""
        name = self._ready_group(now)
        head = self._line_head() if self._line else None
        if name is None:
            return None if head is None else (head, None)
        entry = self._groups[name].line[0]
        if head is not None and self._place(head) < entry[:2]:
            return head, None
        return entry[2], name

    def _take_front(self, now: Number) -> str | None:
        """Take the task ``_front`` names out of its line, counting its group's start
        (a slot, its rate, its turn in the round robin)."""
        front = self._front(now)
        if front is None:
            return None
        task_id, name = front
        if name is None:
            self._pop_line()
            return task_id
        group = self._groups[name]
        heapq.heappop(group.line)
        group.running += 1
        if group.spacing is not None:
            group.tat = max(group.tat, now) + group.spacing
        group.turn = self._counter + 1  # the lease's token
        self._push(name, group)
        return task_id

    def _group_append(self, name: str, entry: Entry) -> None:
        """A task of group ``name`` joins its group's line (``entry``: its line key,
        counter and id); the group enters the heap of groups anew if its front moved."""
        group = self._groups[name]
        heapq.heappush(group.line, entry)
        if group.line[0] is entry:
            self._push(name, group)

    def _leave_group_line(self, task_id: str, name: str) -> None:
        """An AVAILABLE task leaves its group's line without a lease (cancel,
        debounce): O(n)."""
        group = self._groups[name]
        group.line = [entry for entry in group.line if entry[2] != task_id]
        heapq.heapify(group.line)
        self._push(name, group)

    def _free_slot(self, record: Record) -> None:
        """A RESERVED task's lease ends: its group (if any) has a slot free again."""
        name = record[_GROUP]
        if name is not None:
            group = self._groups[name]
            group.running -= 1
            self._push(name, group)

    def _line_fronts(self) -> list[Entry]:
        """The entries at the front of every line, the ungrouped one's and each
        group's (for stats)."""
        heads: list[Entry] = []
        if self._line:
            head = self._line_head()
            heads.append((*self._place(head), head))
        heads.extend(g.line[0] for g in self._groups.values() if g.line)
        return heads
