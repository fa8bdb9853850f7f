"""The shared concurrency groups (scoring, chat, eval, comparison) shared fairly per visitor, not first come first
served.

Gradio serves a group's waiting events in arrival order and bounds only how many wait in all. Measured through
the app's HTTP handler (benchmarks/http_load.py, issue 38): 64 threads sending cheap /score requests from two
addresses kept the scoring group's waiting places full, and 94% of fifty honest visitors' requests got 503; 16
addresses sending backtracking groups (each holding a slot for up to ~3 s) kept its 16 slots, and honest requests
waited 7-17 s behind them. Here, in each shared group:

- a visitor has at most MAX_EVENTS_PER_VISITOR events waiting or running (a page has one or two; a script more),
  past which only that visitor hears "busy";
- a free slot goes to the waiting event of the visitor who held the group's slots least lately (seconds held,
  halving every USAGE_HALF_LIFE_S), arrival order between equals: a visitor whose requests take milliseconds
  goes before one whose requests take seconds, however many of those wait;
- the last quarter of a group's slots (RESERVED_FRACTION) is kept for visitors whose events lately held a slot
  less than SLOW_EVENT_S on average: slow requests from many addresses, one each, cannot hold every slot;
- the group's waiting places are counted apart for quick and for slow visitors: slow requests that wait long
  (behind the quick ones, up to 4 per address) cannot fill the places a quick visitor needs.

`FairGroups(queue, groups).install()` wraps Gradio's queue (its `get_events`, which picks the next event of a
group, and `process_events`, which runs it); `refusal(fn, visitor)` and `crowded(fn, visitor, places)` are asked
as an event joins.
"""

from __future__ import annotations

import collections
import time

from grpo_playground.ui.request_limits import MAX_VISITORS_TRACKED, visitor_of_request

MAX_EVENTS_PER_VISITOR = 4
USAGE_HALF_LIFE_S = 10.0
SLOW_EVENT_S = 0.5  # an honest /score takes milliseconds; a backtracking or power-tower group holds its slot seconds
RESERVED_FRACTION = 0.25
REORDER_EVERY_S = 0.05


class FairGroups:
    def __init__(self, queue, groups: set[str]):
        self.queue, self.groups = queue, set(groups)
        # (group, visitor) -> start times of its running events: a slot held now counts before it is given back
        self.running: collections.defaultdict[tuple[str, str], list[float]] = collections.defaultdict(list)
        # (group, visitor) -> (slot seconds, events, as of time.monotonic()), both decaying alike
        self.usage: dict[tuple[str, str], tuple[float, float, float]] = {}
        self.decided: dict[str, tuple[float, tuple, bool]] = {}  # group -> (when, its state then, held back)

    def install(self) -> None:
        get_events, process_events = self.queue.get_events, self.queue.process_events

        def fair_get_events():
            now, held_back = time.monotonic(), {}
            for group_id in self.groups:
                group = self.queue.event_queue_per_concurrency_id.get(group_id)
                limit = group.concurrency_limit if group is not None else None
                if group is not None and group.queue and (limit is None or group.current_concurrency < limit):
                    if self._hold_back(group_id, group, now):  # (a full group: nothing of it starts now)
                        held_back[group_id], group.queue = group.queue, []
            try:
                return get_events()
            finally:
                for group_id, waiting in held_back.items():
                    self.queue.event_queue_per_concurrency_id[group_id].queue = waiting

        async def charged_process_events(events, batch, begin_time, fn):
            group_id = fn.concurrency_id
            if group_id not in self.groups:
                return await process_events(events, batch, begin_time, fn)
            visitors, start = [_visitor(event) for event in events], time.monotonic()
            for visitor in visitors:
                self.running[group_id, visitor].append(start)
            try:
                return await process_events(events, batch, begin_time, fn)
            finally:
                for visitor in visitors:
                    self.running[group_id, visitor].remove(start)
                    if not self.running[group_id, visitor]:
                        del self.running[group_id, visitor]
                    self._charge(group_id, visitor, time.monotonic() - start)

        self.queue.get_events, self.queue.process_events = fair_get_events, charged_process_events

    def _hold_back(self, group_id: str, group, now: float) -> bool:
        """Order the group's waiting events fairly; True when none may take a free slot now (only slow visitors
        wait and the free slots are the reserved ones). Gradio asks every millisecond while events wait: the
        decision is kept while the group is unchanged, for REORDER_EVERY_S at most."""
        state = (len(group.queue), group.current_concurrency)
        decided = self.decided.get(group_id)
        if decided is not None and decided[1] == state and now - decided[0] < REORDER_EVERY_S:
            return decided[2]
        visitors = {_visitor(event) for event in group.queue}
        used = {visitor: self._used(group_id, visitor, now) for visitor in visitors}
        group.queue.sort(key=lambda event: used[_visitor(event)])  # stable: arrival order between equals
        hold = False
        reserved = int((group.concurrency_limit or 0) * RESERVED_FRACTION)
        if reserved and group.concurrency_limit - group.current_concurrency <= reserved:
            quick = next((e for e in group.queue if not self._slow(group_id, _visitor(e), now)), None)
            if quick is None:  # only slow visitors wait: the reserved slots stay free for a quick one
                hold = True
            else:
                group.queue.remove(quick)
                group.queue.insert(0, quick)
        self.decided[group_id] = (now, state, hold)
        return hold

    def refusal(self, fn, visitor: str) -> str | None:
        """Why `visitor` may not add an event of `fn` now (None: it may)."""
        group_id = fn.concurrency_id
        if group_id not in self.groups:
            return None
        group = self.queue.event_queue_per_concurrency_id.get(group_id)
        waiting = sum(_visitor(event) == visitor for event in group.queue) if group is not None else 0
        held = waiting + len(self.running.get((group_id, visitor), ()))
        if held >= MAX_EVENTS_PER_VISITOR:
            return (f"busy: {held} requests of this kind from your address are waiting or running (at most "
                    f"{MAX_EVENTS_PER_VISITOR}); try again when they are done")
        return None

    def crowded(self, fn, visitor: str, places: int) -> bool:
        """Whether fn's group has `places` events waiting: in a shared group, of visitors as quick (or as slow) as
        this one."""
        group = self.queue.event_queue_per_concurrency_id.get(fn.concurrency_id)
        if group is None or fn.concurrency_id not in self.groups:
            return group is not None and len(group.queue) >= places
        now = time.monotonic()
        slow = self._slow(fn.concurrency_id, visitor, now)
        return sum(self._slow(fn.concurrency_id, _visitor(e), now) == slow for e in group.queue) >= places

    def _slow(self, group_id: str, visitor: str, now: float) -> bool:
        seconds, events = self._charged(group_id, visitor, now)
        running = [now - start for start in self.running.get((group_id, visitor), ())]
        return seconds + sum(running) > SLOW_EVENT_S * (events + len(running)) > 0

    def _used(self, group_id: str, visitor: str, now: float) -> float:
        """Slot seconds the visitor held in the group lately, its running events' so far included."""
        return self._charged(group_id, visitor, now)[0] + sum(now - start for start in
                                                              self.running.get((group_id, visitor), ()))

    def _charged(self, group_id: str, visitor: str, now: float) -> tuple[float, float]:
        seconds, events, when = self.usage.get((group_id, visitor), (0.0, 0.0, now))
        fade = 0.5 ** ((now - when) / USAGE_HALF_LIFE_S)
        return seconds * fade, events * fade

    def _charge(self, group_id: str, visitor: str, seconds: float) -> None:
        now = time.monotonic()
        held, events = self._charged(group_id, visitor, now)
        self.usage[group_id, visitor] = (held + seconds, events + 1, now)
        if len(self.usage) > MAX_VISITORS_TRACKED:  # many addresses: forget those whose use has faded
            self.usage = {key: value for key, value in self.usage.items() if self._charged(*key, now)[1] > 0.01}


def _visitor(event) -> str:
    """Whom a queued event counts against (computed once per event)."""
    visitor = getattr(event, "visitor", None)
    if visitor is None:
        visitor = event.visitor = visitor_of_request(event.request)
    return visitor
