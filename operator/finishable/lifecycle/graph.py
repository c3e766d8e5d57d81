"""The job graph (vertices, edges, subtasks) and the two questions the lifecycle asks of it.

* Which running tasks must a checkpoint be *triggered* on, now that some tasks have finished?
  (FLIP-147, "Triggering Checkpoints After Tasks Finished" and Appendix 1.) A task that still has
  a running precedent gets the barrier from it; one that has none would never hear of the
  checkpoint unless it is triggered directly.
* Which tasks must run again after the driver was lost, given the tasks whose result partitions
  all survived? (FLIP-383, "Re-schedule after JM restart", step 4.) Only what an unfinished sink
  still needs: surviving output is reused, output nobody needs is not recomputed.

Both have an O(n) version, used by the runtime, and a naive version that states the definition
directly, used by the tests as the oracle. The subtask wiring of a POINTWISE edge is Flink's
(``EdgeManagerBuildUtil.connectPointwise``), so that a graph here means what it means in Flink.

Pure: no I/O, no clock, no mutable shared state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "EdgeKind",
    "InvalidJobGraph",
    "JobEdge",
    "JobGraph",
    "JobVertex",
    "TaskId",
    "UnknownTaskError",
    "tasks_to_restart",
    "tasks_to_restart_naive",
    "tasks_to_trigger",
    "tasks_to_trigger_naive",
]


class EdgeKind(StrEnum):
    """How the subtasks of two connected vertices are wired (Flink's ``DistributionPattern``)."""

    ALL_TO_ALL = "ALL_TO_ALL"
    """Every upstream subtask feeds every downstream subtask (a shuffle, a broadcast)."""
    POINTWISE = "POINTWISE"
    """Each subtask feeds a contiguous few downstream subtasks (a narrow dependency)."""


@dataclass(frozen=True, slots=True)
class JobVertex:
    """An operator (a Spark stage) run as ``parallelism`` subtasks ``0 .. parallelism-1``."""

    name: str
    parallelism: int


@dataclass(frozen=True, slots=True)
class JobEdge:
    """``source`` produces the data ``target`` consumes, wired as ``kind`` says."""

    source: str
    target: str
    kind: EdgeKind

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.kind.value})"


@dataclass(frozen=True, order=True, slots=True)
class TaskId:
    """One subtask of one vertex; ordered by vertex name, then subtask, so sorting is stable."""

    vertex: str
    subtask: int

    def __str__(self) -> str:
        return f"{self.vertex}[{self.subtask}]"


class InvalidJobGraph(ValueError):
    """A job graph that cannot run. ``problems`` lists every problem found, each in one sentence."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("invalid job graph: " + "; ".join(self.problems))


class UnknownTaskError(ValueError):
    """A task named in a question about a graph is not one of the graph's tasks."""

    def __init__(self, tasks: Iterable[TaskId]) -> None:
        self.tasks: tuple[TaskId, ...] = tuple(sorted(tasks))
        shown = ", ".join(str(task) for task in self.tasks[:5])
        more = f" and {len(self.tasks) - 5} more" if len(self.tasks) > 5 else ""
        super().__init__(f"not tasks of this job graph: {shown}{more}")


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def _pointwise_upstream(upstream: int, downstream: int, subtask: int) -> range:
    """The upstream subtasks that downstream ``subtask`` consumes over a POINTWISE edge.

    Flink (``EdgeManagerBuildUtil.connectPointwise``): equal parallelism is 1:1; with more
    upstream subtasks, downstream ``i`` consumes ``[floor(i*u/d), floor((i+1)*u/d))``; with fewer,
    upstream ``j`` feeds ``[ceil(j*d/u), ceil((j+1)*d/u))``, so downstream ``i`` has exactly one
    upstream subtask, ``floor(i*u/d)`` (the inverse of that ceiling range).
    """
    if upstream == downstream:
        return range(subtask, subtask + 1)
    if upstream > downstream:
        return range(subtask * upstream // downstream, (subtask + 1) * upstream // downstream)
    only = subtask * upstream // downstream
    return range(only, only + 1)


def _pointwise_downstream(upstream: int, downstream: int, subtask: int) -> range:
    """The downstream subtasks that upstream ``subtask`` feeds over a POINTWISE edge.

    The inverse of :func:`_pointwise_upstream`: with fewer upstream subtasks, upstream ``j`` feeds
    ``[ceil(j*d/u), ceil((j+1)*d/u))``; with more, it feeds exactly the one downstream subtask
    whose range ``[floor(i*u/d), floor((i+1)*u/d))`` holds ``j``, that is ``ceil((j+1)*d/u) - 1``.
    """
    if upstream == downstream:
        return range(subtask, subtask + 1)
    if upstream < downstream:
        return range(
            _ceil_div(subtask * downstream, upstream),
            _ceil_div((subtask + 1) * downstream, upstream),
        )
    only = _ceil_div((subtask + 1) * downstream, upstream) - 1
    return range(only, only + 1)


class JobGraph:
    """A validated, immutable DAG of job vertices and the edges between them.

    Validation happens once, here, so that the algorithms below never meet a dangling edge or a
    cycle: :class:`InvalidJobGraph` names every problem (duplicate or empty vertex names,
    parallelism below 1, edges naming unknown vertices, duplicate edges, a cycle and its vertices).

    Subtask-level connections are only ever enumerated through :meth:`upstream_subtasks` and
    :meth:`downstream_subtasks`, so their cost can be observed and bounded.
    """

    __slots__ = (
        "_by_name",
        "_edges",
        "_inputs",
        "_order",
        "_outputs",
        "_tasks_of",
        "_vertices",
    )

    def __init__(self, vertices: Iterable[JobVertex], edges: Iterable[JobEdge]) -> None:
        self._vertices: tuple[JobVertex, ...] = tuple(vertices)
        self._edges: tuple[JobEdge, ...] = tuple(edges)
        problems: list[str] = []

        self._by_name: dict[str, JobVertex] = {}
        for vertex in self._vertices:
            if not vertex.name:
                problems.append("a vertex has an empty name")
            if vertex.name in self._by_name:
                problems.append(f"duplicate vertex name {vertex.name!r}")
            else:
                self._by_name[vertex.name] = vertex
            if vertex.parallelism < 1:
                problems.append(
                    f"vertex {vertex.name!r} has parallelism {vertex.parallelism}; "
                    "it must be at least 1"
                )

        inputs: dict[str, list[JobEdge]] = {name: [] for name in self._by_name}
        outputs: dict[str, list[JobEdge]] = {name: [] for name in self._by_name}
        seen: dict[tuple[str, str], JobEdge] = {}
        for edge in self._edges:
            unknown = [n for n in (edge.source, edge.target) if n not in self._by_name]
            if unknown:
                names = " and ".join(repr(n) for n in dict.fromkeys(unknown))
                problems.append(f"edge {edge} names unknown vertex {names}")
                continue
            key = (edge.source, edge.target)
            if key in seen:
                problems.append(
                    f"duplicate edge {edge}: {seen[key]} already connects these vertices"
                )
                continue
            seen[key] = edge
            inputs[edge.target].append(edge)
            outputs[edge.source].append(edge)

        if problems:
            raise InvalidJobGraph(problems)
        self._inputs: dict[str, tuple[JobEdge, ...]] = {n: tuple(e) for n, e in inputs.items()}
        self._outputs: dict[str, tuple[JobEdge, ...]] = {n: tuple(e) for n, e in outputs.items()}
        self._order: tuple[str, ...] = self._topological_order()
        self._tasks_of: dict[str, tuple[TaskId, ...]] = {
            v.name: tuple(TaskId(v.name, s) for s in range(v.parallelism)) for v in self._vertices
        }

    def _topological_order(self) -> tuple[str, ...]:
        """Kahn's algorithm in declaration order; a leftover vertex means a cycle, named in full."""
        pending = {name: len(edges) for name, edges in self._inputs.items()}
        queue = deque(name for name, count in pending.items() if count == 0)
        order: list[str] = []
        while queue:
            name = queue.popleft()
            order.append(name)
            for edge in self._outputs[name]:
                pending[edge.target] -= 1
                if pending[edge.target] == 0:
                    queue.append(edge.target)
        if len(order) < len(pending):
            raise InvalidJobGraph([f"the job graph has a cycle: {self._find_cycle(set(order))}"])
        return tuple(order)

    def _find_cycle(self, ordered: set[str]) -> str:
        # Every vertex Kahn could not order has a predecessor it could not order either: walking
        # predecessors from any of them must come back to a vertex already walked.
        start = next(v.name for v in self._vertices if v.name not in ordered)
        walk: list[str] = [start]
        position = {start: 0}
        while True:
            previous = next(e.source for e in self._inputs[walk[-1]] if e.source not in ordered)
            if previous in position:
                cycle = walk[position[previous] :][::-1]
                # Start the message at the vertex declared first, whatever vertex the walk began at.
                declared = {v.name: i for i, v in enumerate(self._vertices)}
                first = min(range(len(cycle)), key=lambda i: declared[cycle[i]])
                cycle = cycle[first:] + cycle[:first]
                return " -> ".join([*cycle, cycle[0]])
            position[previous] = len(walk)
            walk.append(previous)

    # -- vertices and edges -------------------------------------------------------------------

    @property
    def vertices(self) -> tuple[JobVertex, ...]:
        """The vertices in declaration order."""
        return self._vertices

    @property
    def edges(self) -> tuple[JobEdge, ...]:
        """The edges in declaration order."""
        return self._edges

    def vertex(self, name: str) -> JobVertex:
        """The vertex called ``name``; ``KeyError`` if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no vertex {name!r} in this job graph") from None

    def inputs(self, vertex: str) -> tuple[JobEdge, ...]:
        """The edges into ``vertex``, in declaration order."""
        return self._inputs[self.vertex(vertex).name]

    def outputs(self, vertex: str) -> tuple[JobEdge, ...]:
        """The edges out of ``vertex``, in declaration order."""
        return self._outputs[self.vertex(vertex).name]

    def sources(self) -> tuple[str, ...]:
        """Vertices without inputs (they read external data), in topological order."""
        return tuple(name for name in self._order if not self._inputs[name])

    def sinks(self) -> tuple[str, ...]:
        """Vertices without outputs (they write the job's results), in topological order."""
        return tuple(name for name in self._order if not self._outputs[name])

    def topological_order(self) -> tuple[str, ...]:
        """Vertex names, every vertex after all of its upstream vertices."""
        return self._order

    # -- tasks ----------------------------------------------------------------------------------

    def tasks(self) -> tuple[TaskId, ...]:
        """Every subtask, vertices in topological order, subtasks ascending."""
        return tuple(task for name in self._order for task in self._tasks_of[name])

    def tasks_of(self, vertex: str) -> tuple[TaskId, ...]:
        """The subtasks of ``vertex``, ascending."""
        return self._tasks_of[self.vertex(vertex).name]

    def task_count(self) -> int:
        """How many subtasks the graph has (the n of the O(n) algorithms)."""
        return sum(v.parallelism for v in self._vertices)

    def __contains__(self, task: object) -> bool:
        if not isinstance(task, TaskId):
            return False
        vertex = self._by_name.get(task.vertex)
        return vertex is not None and 0 <= task.subtask < vertex.parallelism

    def upstream_subtasks(self, edge: JobEdge, subtask: int) -> range:
        """The subtasks of ``edge.source`` that subtask ``subtask`` of ``edge.target`` consumes."""
        upstream = self._by_name[edge.source].parallelism
        if edge.kind is EdgeKind.ALL_TO_ALL:
            return range(upstream)
        return _pointwise_upstream(upstream, self._by_name[edge.target].parallelism, subtask)

    def downstream_subtasks(self, edge: JobEdge, subtask: int) -> range:
        """The subtasks of ``edge.target`` that subtask ``subtask`` of ``edge.source`` feeds."""
        downstream = self._by_name[edge.target].parallelism
        if edge.kind is EdgeKind.ALL_TO_ALL:
            return range(downstream)
        return _pointwise_downstream(self._by_name[edge.source].parallelism, downstream, subtask)

    def upstream_tasks(self, task: TaskId) -> tuple[TaskId, ...]:
        """The precedent tasks of ``task``: every subtask whose output it consumes."""
        self._require(task)
        return tuple(
            TaskId(edge.source, s)
            for edge in self._inputs[task.vertex]
            for s in self.upstream_subtasks(edge, task.subtask)
        )

    def downstream_tasks(self, task: TaskId) -> tuple[TaskId, ...]:
        """The descendant tasks of ``task`` one edge away: every subtask consuming its output."""
        self._require(task)
        return tuple(
            TaskId(edge.target, s)
            for edge in self._outputs[task.vertex]
            for s in self.downstream_subtasks(edge, task.subtask)
        )

    def _require(self, task: TaskId) -> None:
        if task not in self:
            raise UnknownTaskError([task])

    def require_tasks(self, tasks: Iterable[TaskId]) -> None:
        """Raise :class:`UnknownTaskError` naming every one of ``tasks`` the graph does not have."""
        unknown = [task for task in tasks if task not in self]
        if unknown:
            raise UnknownTaskError(unknown)

    # -- value semantics ------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobGraph):
            return NotImplemented
        return set(self._vertices) == set(other._vertices) and set(self._edges) == set(other._edges)

    def __hash__(self) -> int:
        return hash((frozenset(self._vertices), frozenset(self._edges)))

    def __repr__(self) -> str:
        return f"JobGraph(vertices={list(self._vertices)!r}, edges={list(self._edges)!r})"


# -- FLIP-147: the tasks to trigger a checkpoint on ---------------------------------------------


def tasks_to_trigger(graph: JobGraph, running: AbstractSet[TaskId]) -> frozenset[TaskId]:
    """The running tasks that have no running precedent task (FLIP-147, Appendix 1).

    Works on the job graph rather than on task pairs, in O(tasks + POINTWISE connections):

    * a vertex none of whose tasks runs has nothing to trigger;
    * an ALL_TO_ALL input whose upstream vertex has any running task gives *every* task of the
      vertex a running precedent, and a POINTWISE input whose upstream vertex runs entirely does
      too (each subtask consumes at least one upstream subtask): nothing to trigger;
    * otherwise every ALL_TO_ALL upstream has finished, so only the POINTWISE precedents of the
      vertex's running tasks are looked at, and only over edges whose upstream still runs.

    ALL_TO_ALL connections are never enumerated. Tasks not in ``running`` count as finished.
    """
    graph.require_tasks(running)
    running_by_vertex: dict[str, list[TaskId]] = {}
    for task in running:
        running_by_vertex.setdefault(task.vertex, []).append(task)

    triggered: list[TaskId] = []
    for name in graph.topological_order():
        candidates = running_by_vertex.get(name)
        if not candidates:
            continue
        pointwise_running: list[JobEdge] = []
        blocked = False
        for edge in graph.inputs(name):
            upstream_running = len(running_by_vertex.get(edge.source, ()))
            if upstream_running == 0:
                continue
            if (
                edge.kind is EdgeKind.ALL_TO_ALL
                or upstream_running == graph.vertex(edge.source).parallelism
            ):
                blocked = True
                break
            pointwise_running.append(edge)
        if blocked:
            continue
        for task in candidates:
            if not any(
                TaskId(edge.source, s) in running
                for edge in pointwise_running
                for s in graph.upstream_subtasks(edge, task.subtask)
            ):
                triggered.append(task)
    return frozenset(triggered)


def tasks_to_trigger_naive(graph: JobGraph, running: AbstractSet[TaskId]) -> frozenset[TaskId]:
    """The definition, checked task by task over all precedents: O(n²) on ALL_TO_ALL edges."""
    graph.require_tasks(running)
    return frozenset(
        task
        for task in running
        if not any(upstream in running for upstream in graph.upstream_tasks(task))
    )


# -- FLIP-383: the tasks to run again after the driver was lost ---------------------------------


def tasks_to_restart(graph: JobGraph, finished: AbstractSet[TaskId]) -> frozenset[TaskId]:
    """The tasks to schedule after a driver failover (FLIP-383, "Re-schedule after JM restart").

    ``finished`` holds the tasks all of whose result partitions survived. Starting from the
    unfinished sink tasks, every unfinished precedent of a task that must run must run too; a
    finished task stops the walk because its output is reused. A task whose output no unfinished
    sink needs is not scheduled, finished or not.

    O(tasks + POINTWISE connections + edges): an ALL_TO_ALL input is expanded once, the first time
    any task of its target must run, since every task of the target needs all of its upstream.
    """
    graph.require_tasks(finished)
    scheduled: set[TaskId] = set()
    stack: list[TaskId] = []

    def need(tasks: Iterable[TaskId]) -> None:
        for task in tasks:
            if task not in finished and task not in scheduled:
                scheduled.add(task)
                stack.append(task)

    for sink in graph.sinks():
        need(graph.tasks_of(sink))
    expanded: set[tuple[str, str]] = set()
    while stack:
        task = stack.pop()
        for edge in graph.inputs(task.vertex):
            if edge.kind is EdgeKind.ALL_TO_ALL:
                if (edge.source, edge.target) not in expanded:
                    expanded.add((edge.source, edge.target))
                    need(graph.tasks_of(edge.source))
            else:
                need(TaskId(edge.source, s) for s in graph.upstream_subtasks(edge, task.subtask))
    return frozenset(scheduled)


def tasks_to_restart_naive(graph: JobGraph, finished: AbstractSet[TaskId]) -> frozenset[TaskId]:
    """The definition as a fixpoint: unfinished sink tasks, plus unfinished precedents, repeated."""
    graph.require_tasks(finished)
    scheduled = {
        task for sink in graph.sinks() for task in graph.tasks_of(sink) if task not in finished
    }
    while True:
        grown = scheduled | {
            upstream
            for task in scheduled
            for upstream in graph.upstream_tasks(task)
            if upstream not in finished
        }
        if grown == scheduled:
            return frozenset(scheduled)
        scheduled = grown
