"""Indexed attributes (``{prefix}.{i}.{field}``) grouped per index, resumed from what an earlier
span of the conversation grouped.

A span resending a long history writes hundreds of indexed attributes, the same ones as the
conversation's previous span plus a few. When the span was decoded against that earlier span
(:class:`~otelsignals.conventions.decoding.AttributeOrigin`), the groups built then from the
attributes the two share are taken over, and only the rest is grouped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otelsignals.conventions.decoding import AttributeOrigin


@dataclass(slots=True, eq=False)
class IndexedFold:
    """Attributes grouped per slot (group, index), the slots in the order they first appear: per
    slot (position in that order) its entry, the positions of its first and last attribute, and the
    running maximum of the last positions (so the slots that used only the first N attributes are
    found by bisection); ``where`` finds a slot's position.

    A span's fold is resumed from the previous span's by taking its lists over, cut to the slots
    kept (``stolen`` then marks the previous fold as unusable), so that a turn costs what it adds,
    not a copy of the history."""

    slots: list[tuple[int, int]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)
    first: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    running_last: list[int] = field(default_factory=list)
    where: dict[tuple[int, int], int] = field(default_factory=dict)
    unordered_at: int | None = None  # the first position whose slot is not after the one before
    stolen: bool = False

    def cut(self, count: int) -> IndexedFold:
        """This fold's first ``count`` slots, as a new fold owning the lists (this one is spent)."""
        for position in range(count, len(self.slots)):
            del self.where[self.slots[position]]
        for items in (self.slots, self.entries, self.first, self.last, self.running_last):
            del items[count:]
        self.stolen = True
        kept = IndexedFold(self.slots, self.entries, self.first, self.last, self.running_last, self.where)
        if self.unordered_at is not None and self.unordered_at < count:
            kept.unordered_at = self.unordered_at
        return kept


Locate = Callable[[str], "tuple[int, int] | None"]
Fill = Callable[[dict[str, Any], str, Any], None]


def indexed_groups(
    name: str,
    attributes: dict[str, Any],
    origin: AttributeOrigin | None,
    groups: int,
    locate: Locate,
    fill: Fill,
) -> list[list[dict[str, Any]]]:
    """Per group ``0 .. groups - 1``, the entries of its indexes in index order: ``locate(key)`` says
    which (group, index) a key belongs to (None: not an indexed key), ``fill(entry, key, value)``
    puts it into that index's entry.

    With ``origin`` (the span was decoded against an earlier one), the entries built for the earlier
    span from the attributes the two share are the same objects, and only the rest is read: the
    entries must not be changed afterwards. ``name`` keeps apart the folds of different readers.
    """
    if origin is None:
        fold = _fold(attributes.items(), 0, locate, fill)
    else:
        previous = origin.base.groups.get(name) if origin.base is not None else None
        fold = _resume(previous, origin, locate, fill) if previous and not previous.stolen else None
        if fold is None:
            fold = _fold(origin.decoded.pairs, 0, locate, fill)
            assert fold is not None  # a fold from scratch always completes
        origin.decoded.groups[name] = fold
    assert fold is not None  # a fold from scratch always completes
    slots, entries = fold.slots, fold.entries
    if fold.unordered_at is None:  # the common case: indexes written in order, a slice per group
        bounds = [bisect_left(slots, (group,)) for group in range(groups + 1)]
        return [entries[bounds[group] : bounds[group + 1]] for group in range(groups)]
    order = sorted(range(len(slots)), key=slots.__getitem__)
    ordered = [slots[position] for position in order]
    bounds = [bisect_left(ordered, (group,)) for group in range(groups + 1)]
    return [[entries[order[at]] for at in range(bounds[group], bounds[group + 1])] for group in range(groups)]


def _fold(
    pairs: Any, position: int, locate: Locate, fill: Fill, kept: IndexedFold | None = None
) -> IndexedFold | None:
    """Group ``pairs`` (the first one being attribute ``position``) after the ``kept`` slots, which
    all end before it; None when one of the pairs belongs to a kept slot (kept entries are shared
    with an earlier span's fold: never changed)."""
    fold = kept or IndexedFold()
    slots, entries, first, last, where = fold.slots, fold.entries, fold.first, fold.last, fold.where
    kept_slots = len(slots)
    for key, value in pairs:
        slot = locate(key)
        if slot is not None:
            at = where.get(slot)
            if at is None:
                at = where[slot] = len(slots)
                if slots and fold.unordered_at is None and slot <= slots[-1]:
                    fold.unordered_at = at
                slots.append(slot)
                entries.append({})
                first.append(position)
                last.append(position)
            elif at < kept_slots:
                return None
            last[at] = position
            fill(entries[at], key, value)
        position += 1
    running = accumulate(last[kept_slots:], max, initial=fold.running_last[-1] if kept_slots else -1)
    next(running)  # the initial value
    fold.running_last.extend(running)
    return fold


def _resume(previous: IndexedFold, origin: AttributeOrigin, locate: Locate, fill: Fill) -> IndexedFold | None:
    """The fold of ``origin``'s attributes, the first ``shared`` of which ``previous`` was folded from
    (but for replaced ones outside any index): the slots of ``previous`` that used only attributes
    before some restart position are kept (found by bisection), the attributes from there are read."""
    assert origin.base is not None
    shared, pairs, old_pairs = origin.shared, origin.decoded.pairs, origin.base.pairs
    if any(locate(pairs[p][0]) is not None or locate(old_pairs[p][0]) is not None for p in origin.replaced):
        return None  # an indexed attribute changed in the middle: read it all
    # Slots appear in the order of their first attribute, so the ones after the kept ones start at
    # or after the restart position and are read again whole.
    count = bisect_left(previous.running_last, shared)
    while True:
        restart = min(shared, previous.first[count]) if count < len(previous.first) else shared
        fewer = bisect_left(previous.running_last, restart, 0, count)
        if fewer == count:
            break
        count = fewer
    return _fold(pairs[restart:], restart, locate, fill, previous.cut(count))
