"""Seeded procedural generator of perfect mazes (paper §5.2: the single-solution test).

Grid convention
---------------
``size`` is the side of the square *grid* including walls, as in the paper's 17x17 mazes. It must be odd and
>= 5. Maze *cells* sit at odd coordinates ``(2i+1, 2j+1)`` (so a 17x17 grid has 8x8 cells); the even rows and
columns are walls, except the wall squares that a carved passage opens between two neighbouring cells. The
outer border is always wall.

Carving is a randomized depth-first search over the cells, which produces a spanning tree of the cell grid (a
"perfect" maze): between any two open squares there is exactly one simple path, so each (maze, start, goal)
has exactly one correct action sequence. Start and goal are two distinct cells drawn uniformly.

Actions move one *grid square*: ``U`` (row - 1), ``D`` (row + 1), ``L`` (col - 1), ``R`` (col + 1). Going from
one cell to a neighbouring cell therefore takes two identical actions (through the opened wall square).
With this convention a 17x17 maze is 17 * 18 + 1 = 307 prompt tokens and its longest path is < 127 actions,
which fits MaxRL's ``max_prompt_length=320`` / ``max_response_length=180``.

Determinism: everything is drawn from ``random.Random(seed)``; a string seed (used for the split streams in
:func:`generate_split`) is hashed by Python with SHA-512, so it is stable across runs and platforms.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from fgrpo_verl.theory._checks import whole

WALL, OPEN, START, GOAL = "#", ".", "S", "G"
# action -> (row delta, col delta)
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
MIN_SIZE = 5


@dataclass(frozen=True)
class Maze:
    """One maze instance: the grid rows (``#``, ``.``, ``S``, ``G``), start/goal squares and the target path."""

    rows: tuple[str, ...]
    start: tuple[int, int]
    goal: tuple[int, int]
    path: str  # the unique action sequence from start to goal, e.g. "RRDDLL"

    @property
    def size(self) -> int:
        return len(self.rows)

    def key(self) -> str:
        """Identity used for deduplication (the grid text fixes walls, start and goal)."""
        return "\n".join(self.rows)


def check_size(size) -> int:
    """Return ``size`` if it is a valid grid side, else raise ``ValueError``."""
    if isinstance(size, bool) or not isinstance(size, int) or size < MIN_SIZE or size % 2 == 0:
        raise ValueError(f"maze size must be an odd int >= {MIN_SIZE} (grid side including walls, e.g. 17), got "
                         f"{size!r}")
    return size


def max_possible_path_length(size: int) -> int:
    """Upper bound on the number of moves of any simple path in a ``size`` grid: c x c cells and the c^2 - 1 opened
    wall squares of a spanning tree give 2c^2 - 1 open squares, so at most 2c^2 - 2 moves."""
    n_cells = (check_size(size) - 1) // 2
    return 2 * n_cells * n_cells - 2


def _carve(n_cells: int, rng: random.Random) -> list[list[str]]:
    """Randomized DFS over an n_cells x n_cells cell grid; returns the (2n+1)^2 char grid with passages open."""
    side = 2 * n_cells + 1
    grid = [[WALL] * side for _ in range(side)]
    first = (rng.randrange(n_cells), rng.randrange(n_cells))
    visited = {first}
    stack = [first]
    grid[2 * first[0] + 1][2 * first[1] + 1] = OPEN
    while stack:
        ci, cj = stack[-1]
        neighbours = [
            (ci + di, cj + dj)
            for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1))
            if 0 <= ci + di < n_cells and 0 <= cj + dj < n_cells and (ci + di, cj + dj) not in visited
        ]
        if not neighbours:
            stack.pop()
            continue
        ni, nj = rng.choice(neighbours)
        # open the wall square between the two cells, then the new cell
        grid[ci + ni + 1][cj + nj + 1] = OPEN
        grid[2 * ni + 1][2 * nj + 1] = OPEN
        visited.add((ni, nj))
        stack.append((ni, nj))
    return grid


def shortest_path(rows, start: tuple[int, int], goal: tuple[int, int]) -> str:
    """BFS over non-wall squares; returns the action string of a shortest path (the only one in a perfect maze)."""
    parent: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        pos = queue.popleft()
        if pos == goal:
            break
        for action, (dr, dc) in MOVES.items():
            nxt = (pos[0] + dr, pos[1] + dc)
            if 0 <= nxt[0] < len(rows) and 0 <= nxt[1] < len(rows[0]) and rows[nxt[0]][nxt[1]] != WALL:
                if nxt not in parent:
                    parent[nxt] = (pos, action)
                    queue.append(nxt)
    if goal not in parent:
        raise ValueError(f"goal {goal} is not reachable from start {start}")
    actions = []
    pos = goal
    while parent[pos] is not None:
        pos, action = parent[pos]
        actions.append(action)
    return "".join(reversed(actions))


def generate_maze(size: int, seed: int | str) -> Maze:
    """One perfect maze of grid side ``size`` with random start and goal cells, deterministic in ``seed``."""
    check_size(size)
    rng = random.Random(seed)
    n_cells = (size - 1) // 2
    grid = _carve(n_cells, rng)
    cells = [(2 * i + 1, 2 * j + 1) for i in range(n_cells) for j in range(n_cells)]
    start, goal = rng.sample(cells, 2)
    grid[start[0]][start[1]] = START
    grid[goal[0]][goal[1]] = GOAL
    rows = tuple("".join(r) for r in grid)
    return Maze(rows=rows, start=start, goal=goal, path=shortest_path(rows, start, goal))


def generate_split(
    size: int, n: int, seed: int, split: str, exclude: set[str] | frozenset[str] = frozenset(), max_tries_factor: int = 20
) -> list[Maze]:
    """``n`` distinct mazes from the seed stream ``f"{seed}:{split}:{i}"``, skipping any whose key is in ``exclude``.

    Different ``split`` names give independent streams; ``exclude`` (the held-out keys) makes train and held-out
    disjoint even when the streams collide, which happens often for small sizes (a 7x7 grid has only
    192 spanning trees x 72 start/goal pairs = 13,824 distinct instances).
    """
    whole("n (number of mazes)", n)
    mazes: list[Maze] = []
    seen = set(exclude)
    for i in range(max_tries_factor * n):
        maze = generate_maze(size, f"{seed}:{split}:{i}")
        if maze.key() not in seen:
            seen.add(maze.key())
            mazes.append(maze)
            if len(mazes) == n:
                return mazes
    raise ValueError(f"only {len(mazes)} distinct {size}x{size} mazes found for split {split!r} after "
                     f"{max_tries_factor * n} draws (asked for n={n}): the maze space at this size is too small; use "
                     "a larger size or a smaller n")
