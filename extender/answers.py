"""Answer tables: each node's ready wire fragment per request shape, kept current by cache events.

kube-scheduler asks the same few request shapes about thousands of nodes that barely change
between calls. So per shape (for prioritize ``scoring.Inputs``, everything the score reads
besides the node; for filter the pod's wants) a table keeps per node the rendered fragment of
the answer (``{"Host":"n","Score":7}``, or the filter outcome with its message). The index
(``figures.Index``) tells which nodes each cache event changed (``add_refresh_listener``) and
exactly those entries go; a model-wide term (``scoring.model_term``) that moves drops only
that model's fitting entries. A call is then a lookup per name and a join; only misses run the
Python steps (``filtering.filter_nodes``, ``scoring.score_nodes``: the same answers).

Bounds: entries only for nodes the index knows (a name a request merely carries is answered
and forgotten), at most ``SHAPES`` tables per verb (least recently used dropped).
Fragments are rendered by the standard library (ASCII escapes), so the bytes are the ones the
server wrote before the tables existed.
"""

from __future__ import annotations

import bisect
import json
import operator
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from itertools import filterfalse, islice
from typing import TypeVar

from migfit.extender import figures, filtering, scoring, scoring_log

_K = TypeVar("_K")
_V = TypeVar("_V")
SHAPES = 16  # request shapes whose tables are kept, per verb

_FRAG = operator.attrgetter("frag")
_CODE = operator.attrgetter("code")


def _string(text: str) -> str:
    """A JSON string as the standard library writes it (what the wire carried before)."""
    return json.dumps(text)


class Entry:
    """One node's prioritize answer: its fragment and the score behind it (the scoring log)."""

    __slots__ = ("code", "frag", "log", "node", "score", "text")

    def __init__(self, frag: bytes, node: scoring.NodeScore) -> None:
        self.frag = frag
        self.node = node
        self.score = node.score
        self.code = 2 * node.score + node.fits  # score and fit in one small int (histogram)
        # The node's scoring-log JSON entry and text part, rendered when first logged.
        self.log: str | None = None
        self.text: str | None = None


class _ScoreTable:
    """Prioritize answers of one ``scoring.Inputs`` per node, ranked per score for the log."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.model_of: dict[str, str] = {}  # fitting nodes -> their model (model-wide term)
        self.by_model: dict[str, set[str]] = {}
        self.terms: dict[str, Hashable] = {}  # the model-wide term the entries were made with
        self.ranked: dict[int, list[tuple[float, str]]] = {}  # score -> (-raw, name), sorted
        self.order: dict[int, list[str]] = {}  # score -> the names of ``ranked[score]``
        self.version = 0  # bumped on every change (the log's snapshot checks it)

    def put(self, name: str, entry: Entry, model_key: str | None) -> None:
        self.drop(name)
        self.entries[name] = entry
        ranked = self.ranked.setdefault(entry.score, [])
        key = (-entry.node.raw, name)
        at = bisect.bisect_left(ranked, key)
        ranked.insert(at, key)
        self.order.setdefault(entry.score, []).insert(at, name)
        if model_key is not None:
            self.model_of[name] = model_key
            self.by_model.setdefault(model_key, set()).add(name)
        self.version += 1

    def drop(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is None:
            return
        self.version += 1
        ranked = self.ranked[entry.score]
        at = bisect.bisect_left(ranked, (-entry.node.raw, name))
        del ranked[at]
        del self.order[entry.score][at]
        model_key = self.model_of.pop(name, None)
        members = None if model_key is None else self.by_model.get(model_key)
        if members is not None:
            members.discard(name)

    def drop_model(self, model_key: str) -> None:
        for name in list(self.by_model.pop(model_key, ())):
            self.drop(name)
        self.terms.pop(model_key, None)


class _FilterTable:
    """Filter answers of one request shape per node: ``"n"`` or ``"n":"message"``."""

    def __init__(self) -> None:
        self.passed: dict[str, bytes] = {}
        self.failed: dict[str, bytes] = {}
        self.unresolvable: dict[str, bytes] = {}
        self.codes: dict[str, tuple[bool, filtering.Code]] = {}  # failing nodes' first code
        self.known: set[str] = set()

    def drop(self, name: str) -> None:
        if name in self.known:
            self.known.discard(name)
            self.passed.pop(name, None)
            self.failed.pop(name, None)
            self.unresolvable.pop(name, None)
            self.codes.pop(name, None)


class Filtered:
    """One filter call's answer as fragments, in input order."""

    __slots__ = ("codes", "failed", "passed", "passed_names", "unresolvable")

    def __init__(self, passed: list[bytes], passed_names: list[str], failed: list[bytes],
                 unresolvable: list[bytes], codes: Counter[tuple[bool, filtering.Code]]
                 ) -> None:
        self.passed = passed
        self.passed_names = passed_names
        self.failed = failed
        self.unresolvable = unresolvable
        self.codes = codes

    def names_body(self) -> bytes:
        """The ``ExtenderFilterResult`` of NodeNames mode."""
        return (b'{"Nodes":null,"NodeNames":[' + b",".join(self.passed) + b"]," +
                self.failures() + b"}")

    def failures(self) -> bytes:
        """``"FailedNodes":{...},"FailedAndUnresolvableNodes":{...},"Error":""``."""
        return (b'"FailedNodes":{' + b",".join(self.failed) +
                b'},"FailedAndUnresolvableNodes":{' + b",".join(self.unresolvable) +
                b'},"Error":""')


class Prioritized:
    """One prioritize call's answer and what its scoring-log line needs (``scoring_log``)."""

    __slots__ = ("body", "duration_s", "entries", "names", "request", "table", "unknown",
                 "version")

    def __init__(self, *, body: bytes, request: filtering.PodRequest, entries: list[Entry],
                 names: dict[str, None], table: _ScoreTable, unknown: bool) -> None:
        self.body = body
        self.request = request
        self.entries = entries
        self.names = names
        self.table = table
        self.version = table.version
        self.unknown = unknown  # names the table does not keep are in the answer
        self.duration_s = 0.0

    @property
    def nodes(self) -> int:
        return len(self.entries)

    def summary(self, n: int, render: scoring_log.Render | None = None,
                describe: scoring_log.Render | None = None) -> scoring_log.Summary:
        """The best ``n`` (all when ``n <= 0``), the histogram and the fit count, from the
        table's per-score ranking while the table is as it was at the answer: one C-level
        pass over the entries and O(n) Python work. With ``render`` / ``describe``, the best
        entries' JSON / their first three text parts too, kept on the entries."""
        entries = self.entries
        if self.unknown or self.table.version != self.version:
            return scoring_log.summarize([e.node for e in entries], n)
        table, names = self.table, self.names
        histogram: dict[int, int] = {}
        fit = 0
        for code, count in sorted(Counter(map(_CODE, entries)).items()):
            score = code >> 1
            histogram[score] = histogram.get(score, 0) + count
            fit += count if code & 1 else 0
        want = len(entries) if n <= 0 else min(n, len(entries))
        kept = table.entries.__getitem__
        best: list[Entry] = []
        for score in sorted(histogram, reverse=True):
            room = min(want - len(best), histogram[score])
            if room <= 0:
                break
            order = table.order.get(score, ())
            best.extend(map(kept, islice(filter(names.__contains__, order), room)))
        json_parts: list[str] | None = None
        if render is not None:
            json_parts = []
            for e in best:
                if e.log is None:
                    e.log = render(e.node)
                json_parts.append(e.log)
        text_parts: list[str] | None = None
        if describe is not None:
            text_parts = []
            for e in best[:scoring_log.TEXT_NODES]:
                if e.text is None:
                    e.text = describe(e.node)
                text_parts.append(e.text)
        return scoring_log.Summary(best=[e.node for e in best], histogram=histogram,
                                   fit=fit, nodes=len(entries), json=json_parts,
                                   text=text_parts)


class Tables:
    """The answer tables of one ``figures.Index`` (one per server; nothing process-wide)."""

    def __init__(self, index: figures.Index, *, shapes: int = SHAPES,
                 all_pods: bool = False) -> None:
        self._index = index
        self._all_pods = all_pods  # score pods without MIG requests too (--score-all-pods)
        self._shapes = shapes
        self._scores: dict[scoring.Inputs, _ScoreTable] = {}
        self._filters: dict[tuple[figures.Want, ...], _FilterTable] = {}
        self._heads: dict[str, bytes] = {}  # known node -> b'{"Host":"n","Score":'
        index.add_refresh_listener(self._forget)

    def _forget(self, names: Sequence[str]) -> None:
        """Cache events changed ``names``: their entries go, in every table."""
        known = self._index.cluster.node
        for name in names:
            for s in self._scores.values():
                s.drop(name)
            for f in self._filters.values():
                f.drop(name)
            if known(name) is None:
                self._heads.pop(name, None)

    def entries(self) -> int:
        """Entries in all tables (bounded by nodes × ``SHAPES`` × 2)."""
        return (sum(len(t.entries) for t in self._scores.values())
                + sum(len(t.known) for t in self._filters.values()) + len(self._heads))

    @staticmethod
    def _lru(tables: dict[_K, _V], key: _K, make: Callable[[], _V], limit: int) -> _V:
        table = tables.pop(key, None)
        if table is None:
            table = make()
            while len(tables) >= limit:
                del tables[next(iter(tables))]
        tables[key] = table
        return table

    # ------------------------------------------------------------ prioritize

    def prioritize(self, request: filtering.PodRequest, names: Iterable[str]) -> Prioritized:
        """The ``HostPriorityList`` body for ``names`` (``scoring.score_nodes``'s answers)."""
        index = self._index
        index.refresh()
        unique = dict.fromkeys(names)
        inputs = scoring.inputs_of(index, request, all_pods=self._all_pods)
        table = self._lru(self._scores, inputs, _ScoreTable, self._shapes)
        for model_key, term in list(table.terms.items()):
            if scoring.model_term(index, request, model_key) != term:
                table.drop_model(model_key)
        entries: list[Entry | None] = list(map(table.entries.get, unique))
        unknown = False
        if None in entries:
            unknown = self._fill_scores(table, request, unique, entries)
        done: list[Entry] = entries  # type: ignore[assignment] # no None left
        body = b"[" + b",".join(map(_FRAG, done)) + b"]"
        return Prioritized(body=body, request=request, entries=done, names=unique,
                           table=table, unknown=unknown)

    def _fill_scores(self, table: _ScoreTable, request: filtering.PodRequest,
                     unique: dict[str, None], entries: list[Entry | None]) -> bool:
        """Score the names ``entries`` lacks, keep those of known nodes; True when some
        names are not the index's nodes."""
        index = self._index
        figs = index.figures
        missing = [n for n, e in zip(unique, entries, strict=True) if e is None]
        fresh = dict(zip(missing, scoring.score_nodes(index, request, missing,
                                                      all_pods=self._all_pods), strict=True))
        unknown = False
        for i, (name, e) in enumerate(zip(unique, entries, strict=True)):
            if e is not None:
                continue
            s = fresh[name]
            head = self._heads.get(name)
            if head is None:
                head = ('{"Host":' + _string(name) + ',"Score":').encode()
                if name in figs:
                    self._heads[name] = head
            entry = entries[i] = Entry(head + b"%d}" % s.score, s)
            fig = figs.get(name)
            if fig is None:
                unknown = True
                continue
            model_key: str | None = None
            if s.fits and request.mig:
                model_key = fig.model_key
                if model_key not in table.terms:
                    table.terms[model_key] = s.scarce
            table.put(name, entry, model_key)
        return unknown

    # ------------------------------------------------------------ filter

    def filter(self, request: filtering.PodRequest, names: Iterable[str]) -> Filtered:
        """``filtering.filter_nodes``'s verdicts for ``names`` as fragments, in input order."""
        index = self._index
        index.refresh()
        unique = dict.fromkeys(names)
        table = self._lru(self._filters, request.wants, _FilterTable, self._shapes)
        missing = list(filterfalse(table.known.__contains__, unique))
        if missing:
            result = filtering.filter_nodes(index, request, missing)
            figs = index.figures
            strays = [n for n in missing if n not in figs]
            self._keep(table, result, figs)
            if strays:  # names the index does not know: answered in order, kept nowhere
                return self._ordered(table, unique, result)
        passed = list(filter(None, map(table.passed.get, unique)))
        return Filtered(
            passed=passed,
            passed_names=(list(unique) if len(passed) == len(unique)
                          else list(filter(table.passed.__contains__, unique))),
            failed=list(filter(None, map(table.failed.get, unique))),
            unresolvable=list(filter(None, map(table.unresolvable.get, unique))),
            codes=Counter(filter(None, map(table.codes.get, unique))))

    @staticmethod
    def _keep(table: _FilterTable, result: filtering.FilterResult,
              figs: Mapping[str, figures.NodeFigures]) -> None:
        known = figs.__contains__
        for name in result.passed:
            if known(name):
                table.known.add(name)
                table.passed[name] = _string(name).encode()
        for group, into in ((result.failed, table.failed),
                            (result.unresolvable, table.unresolvable)):
            for name, reasons in group.items():
                if known(name):
                    table.known.add(name)
                    into[name] = _pair(name, reasons)
                    table.codes[name] = (reasons[0].unresolvable, reasons[0].code)

    @staticmethod
    def _ordered(table: _FilterTable, unique: dict[str, None],
                 result: filtering.FilterResult) -> Filtered:
        passed: list[bytes] = []
        passed_names: list[str] = []
        failed: list[bytes] = []
        unresolvable: list[bytes] = []
        codes: Counter[tuple[bool, filtering.Code]] = Counter()
        fresh_passed = set(result.passed)
        for name in unique:
            if name in table.known:
                frag = table.passed.get(name)
                if frag is None:
                    pair = table.failed.get(name) or table.unresolvable[name]
                    code = table.codes[name]
            elif name in fresh_passed:
                frag = _string(name).encode()
            else:
                frag = None
                reasons = result.failed.get(name) or result.unresolvable[name]
                pair = _pair(name, reasons)
                code = (reasons[0].unresolvable, reasons[0].code)
            if frag is not None:
                passed.append(frag)
                passed_names.append(name)
                continue
            (unresolvable if code[0] else failed).append(pair)
            codes[code] += 1
        return Filtered(passed=passed, passed_names=passed_names, failed=failed,
                        unresolvable=unresolvable, codes=codes)


def _pair(name: str, reasons: Sequence[filtering.Reason]) -> bytes:
    return (_string(name) + ":" + _string(filtering.node_message(reasons))).encode()
