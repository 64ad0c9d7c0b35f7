"""Compose fgrpo-verl's Hydra config exactly as ``fgrpo-verl train`` would, and validate it with verl.

A composition that fails because of what the user typed raises ``fgrpo_verl.config.errors.ConfigError`` (a
``ValueError``): one line naming the override, what is wrong and what is valid, with a "did you mean"; the CLI
prints it and exits 2.

:class:`SharedComposer` composes many runs (a recipe's) at a fraction of the cost of one :func:`compose` each:
see its docstring for what is shared and why the result is the same.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from fgrpo_verl.config.paths import CONFIG_NAME, config_dir
from fgrpo_verl.config.errors import ConfigError, check_value_types, explain


def verl_config_dir() -> Path:
    """verl's own config directory, found without importing verl (``find_spec`` of a top-level package does not
    execute it)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("verl is not installed: pip install 'verl[verl-core]==0.9.1'")
    return Path(spec.origin).parent / "trainer" / "config"


def _searchpath() -> str:
    return f"hydra.searchpath=[file://{verl_config_dir()}]"


@contextlib.contextmanager
def _hydra(config_name: str) -> Iterator[None]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        yield


def _compose_raw(overrides: Sequence[str], config_name: str):
    from hydra import compose as hydra_compose

    with _hydra(config_name):
        return hydra_compose(config_name=config_name, overrides=[_searchpath(), *overrides])


def compose(overrides: Sequence[str] = (), config_name: str = CONFIG_NAME):
    """Return the composed ``DictConfig`` for ``overrides`` (Hydra command-line syntax).

    Composing does not import verl: ``fgrpo_trainer.yaml`` searches ``pkg://verl.trainer.config``, which would
    import verl (and load every verl plugin) before ``fgrpo-verl train`` has exported the run's environment
    (``VERL_PLATFORM``, ...); the same directory is given to Hydra as a file path instead.

    Raises :class:`ConfigError` for an override that cannot be applied (a misspelt key or group option, a value
    of the wrong type for its key, a syntax error), naming it and what is valid. Same result as Hydra's compose
    of all overrides at once (:class:`SharedComposer`).
    """
    return SharedComposer(config_name).compose(overrides)


def config_groups() -> dict[str, list[str]]:
    """fgrpo-verl's own config groups and their options (``hydra_configs/<group>/<option>.yaml``)."""
    root = config_dir()
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml"))
        for d in sorted(root.iterdir())
        if d.is_dir() and not d.name.startswith(("_", "."))
    }


# --- many runs at once -----------------------------------------------------------------------------------------

# An override that only sets a value (Hydra applies these after the defaults list is merged): a dotted key, no
# config group path ('/') or package ('@'), not Hydra's own settings. Everything else selects configs.
_VALUE_KEY = re.compile(r"^[+~]{0,2}(?!hydra\.)[A-Za-z_][\w-]*(\.[\w-]+)+$")


def is_value_override(override: str) -> bool:
    """True for ``a.b=1`` / ``+a.b=1`` / ``++a.b=1`` / ``~a.b`` (a config value); False for a config group
    selection (``algo=grpo``), a top-level key, or a ``hydra.*`` setting."""
    return bool(_VALUE_KEY.match(override.split("=", 1)[0].strip()))


@contextlib.contextmanager
def batch_session() -> Iterator[None]:
    """For a batch of configs (a recipe's runs; also a decorator): OmegaConf re-parses every ``${...}`` string
    with its ANTLR grammar each time it resolves one, and planning a run resolves the whole config several times
    (fingerprint, ``validate``, freezing ``${oc.env:...}``), the same few dozen strings thousands of times.
    Within the session, parse trees are cached by string (a parse tree depends on the string alone), the YAML files
    Hydra reads are parsed once (:func:`_cached_yaml_parsing`), and the cyclic garbage collector is paused
    (configs are trees with parent links: each collection walks them all)."""
    with _cached_interpolation_parsing(), _cached_yaml_parsing(), _gc_paused():
        yield


@contextlib.contextmanager
def _cached_yaml_parsing() -> Iterator[None]:
    """Hydra parses every YAML file of the defaults tree again for each composition (PyYAML's pure-Python loader:
    ~60 % of a composition). Within: ``yaml.load`` of a named file returns a copy of its first parse, keyed by
    path, size and modification time. Only the plain data is cached: Hydra builds (and edits) its own config
    objects from it each time."""
    import os

    import yaml

    original = yaml.load
    parsed: dict = {}

    def load(stream, Loader):  # noqa: N803 (yaml's own argument name)
        name = getattr(stream, "name", None)
        if not isinstance(name, str) or not os.path.isfile(name):
            return original(stream, Loader=Loader)
        info = os.stat(name)
        # OmegaConf builds an equal loader class on every call: its qualified name identifies it
        key = (os.path.abspath(name), info.st_size, info.st_mtime_ns, f"{Loader.__module__}.{Loader.__qualname__}")
        if key not in parsed:
            parsed[key] = original(stream, Loader=Loader)
        return copy.deepcopy(parsed[key])

    yaml.load = load
    try:
        yield
    finally:
        yaml.load = original


@contextlib.contextmanager
def _cached_interpolation_parsing() -> Iterator[None]:
    import functools

    import omegaconf.base

    original = omegaconf.base.parse

    @functools.lru_cache(maxsize=4096)
    def parse(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE"):
        return original(value, parser_rule, lexer_mode)

    omegaconf.base.parse = parse
    try:
        yield
    finally:
        omegaconf.base.parse = original


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class SharedComposer:
    """Compose many override lists (a recipe's runs) sharing what they have in common.

    ``compose(overrides)`` here returns what :func:`compose` returns, in two steps:

    1. the config of the run's *selections* (every override that is not a plain value: config groups such as
       ``algo=grpo``, top-level keys), composed by Hydra once per distinct selection list and kept (Hydra's own
       cache of parsed YAML files lives for one composition: it edits what it parsed while it builds the defaults
       list, so sharing its cache across compositions leaks one run's selections into the next; a deep copy of it
       per composition costs more than parsing again, measured);
    2. the run's value overrides (``a.b=1``, ``+a.b=1``, ``~a.b``) applied to a copy of it with Hydra's own
       override parser and applier, which is what Hydra itself does after merging the defaults list.

    Step 1's configs are also kept on disk between commands (:class:`ComposeCache`): a second ``launch --status``
    or ``--dry-run`` of a recipe, or ``train`` with the same config groups, skips Hydra.

    ``tests/test_first_hour_on_cpu.py`` checks that every run of every shipped recipe composes to the same config
    both ways. Measured on ``paper_main`` (36 runs, 9 distinct selection lists): docs/slurm.md.
    """

    def __init__(self, config_name: str = CONFIG_NAME):
        self.config_name = config_name
        self._selected: dict[tuple[str, ...], object] = {}
        self._disk = ComposeCache(config_name)

    def compose(self, overrides: Sequence[str]):
        overrides = list(overrides)
        selections = tuple(o for o in overrides if not is_value_override(o))
        values = [o for o in overrides if is_value_override(o)]
        try:
            base = self._selected.get(selections)
            if base is None:
                base = self._disk.load(selections)
                if base is None:
                    base = _compose_raw(selections, self.config_name)
                    self._disk.store(selections, base)
                self._selected[selections] = base
            config = copy.deepcopy(base)
            if values:
                from hydra._internal.config_loader_impl import ConfigLoaderImpl
                from hydra.core.override_parser.overrides_parser import OverridesParser

                ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(values), config)
            check_value_types(base, config, values)
            return config
        except ConfigError:
            raise
        except Exception as exc:
            error = explain(exc, overrides, lambda o: _compose_raw(o, self.config_name))
            if error is None:
                raise
            raise error from exc


# --- composed selections kept between commands -------------------------------------------------------------------

CACHE_ENV = "FGRPO_VERL_CACHE_DIR"
_CACHE_FORMAT = 2
# a file set's entries unused this long are removed (another install's, an old verl's); a temporary file this old
# is a writer that died
_UNUSED_S = 30 * 86400
_STALE_TMP_S = 3600


def cache_root() -> Path | None:
    """Where fgrpo-verl keeps what it can recompute: ``$FGRPO_VERL_CACHE_DIR``, else ``$XDG_CACHE_HOME/fgrpo-verl``,
    else ``~/.cache/fgrpo-verl``; None where none can be named (no home directory: a container's nameless uid)."""
    import os

    try:
        if os.environ.get(CACHE_ENV):
            return Path(os.environ[CACHE_ENV])
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = xdg if os.path.isabs(xdg) else str(Path.home() / ".cache")  # a relative one is ignored (XDG spec)
    except (RuntimeError, KeyError, OSError):
        return None
    return Path(base) / "fgrpo-verl"


def _tighten(path: Path) -> None:
    """A directory this user owns (not a symlink) that others may read but not write (0755 from fgrpo-verl
    41860da's cache) is made 0700, so that the private-directory check below accepts it; one others could write
    (its entries could be theirs) and anything else is left for that check to refuse."""
    import os
    import stat

    with contextlib.suppress(OSError):
        info = os.lstat(path)
        if (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and info.st_mode & 0o077
                and not info.st_mode & 0o022):
            os.chmod(path, 0o700)


def _tree_digest(digest, root: Path) -> None:
    """Add every directory (Hydra takes any directory for a config group) and every ``*.yaml`` file under
    ``root`` to ``digest``, by relative path and content, following symlinks as Hydra does (each real directory
    once: a link cycle ends)."""
    import os

    seen = set()
    for here, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(here)
        rel = os.path.relpath(here, root)
        # a directory's name and where it really is (a relinked directory is another key), then its files once
        digest.update(b"d\0" + rel.encode() + b"\0" + real.encode() + b"\0")
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".yaml"):
                with open(os.path.join(here, name), "rb") as f:
                    digest.update(b"f\0" + os.path.join(rel, name).encode() + b"\0" + f.read() + b"\0")


class ComposeCache:
    """Hydra's composition of a selection list (step 1 of :class:`SharedComposer`) kept on disk, as JSON.

    A composition depends only on the YAML files Hydra reads (fgrpo-verl's ``hydra_configs/`` and verl's
    ``trainer/config/``), the selections, how this module calls Hydra, and the Hydra / OmegaConf versions: nothing
    is resolved yet (``${oc.env:...}`` is read later, when a run's config is resolved). The key hashes all of
    them: every directory and YAML file by relative path and content (symlinks followed, as Hydra follows them),
    this module's source and fgrpo-verl's version; so an edited, added, removed or relinked file, another verl, or
    another fgrpo-verl is another key, never a stale config. Two checkouts with the same files share entries.

    Stored as JSON (the config's plain values, interpolations unresolved, and its struct flag), never pickled: a
    cache file cannot run code. Used only inside a directory this user owns that no one else can write
    (``fgrpo_verl.launch.private_dir``). Anything that goes wrong (no home directory, unwritable or foreign cache
    directory, a truncated entry, another format) is a miss: Hydra composes, as without the cache. Entries are
    written to a temporary file and renamed; file sets unused for 30 days are removed.
    """

    def __init__(self, config_name: str = CONFIG_NAME):
        self.config_name = config_name
        self._files: str | None = None
        # the directory is checked once per cache (a command's composer), not at every load and store
        self._where: Path | None = None
        self._checked = False
        self._pruned = False

    def _files_digest(self) -> str:
        import hashlib

        import hydra
        import omegaconf

        import fgrpo_verl

        if self._files is None:
            digest = hashlib.sha256(repr((_CACHE_FORMAT, hydra.__version__, omegaconf.__version__,
                                          fgrpo_verl.__version__, self.config_name)).encode())
            digest.update(Path(__file__).read_bytes())
            for role, root in (("fgrpo", config_dir()), ("verl", verl_config_dir())):
                digest.update(role.encode() + b"\0")
                _tree_digest(digest, root)
            self._files = digest.hexdigest()[:20]
        return self._files

    def _dir(self) -> Path | None:
        """This file set's directory, private to this user (created if missing), or None: no cache here."""
        if not self._checked:
            self._checked = True
            self._where = self._private_dir()
        return self._where

    def _private_dir(self) -> Path | None:
        from fgrpo_verl.launch.private_dir import ensure_private_dir

        root = cache_root()
        if root is None:
            return None
        try:
            root.mkdir(parents=True, exist_ok=True)
            _tighten(root / "compose")
            return ensure_private_dir(ensure_private_dir(root / "compose") / self._files_digest())
        except (OSError, ValueError):
            return None

    def _prune(self, where: Path) -> None:
        """Once per cache: remove file sets unused for a month and temporary files of writers that died."""
        import shutil
        import time

        if self._pruned:
            return
        self._pruned = True
        now = time.time()
        for other in where.parent.iterdir():
            if other != where and other.is_dir() and now - other.stat().st_mtime > _UNUSED_S:
                shutil.rmtree(other, ignore_errors=True)
        for leftover in where.glob("*.tmp"):
            if now - leftover.stat().st_mtime > _STALE_TMP_S:
                leftover.unlink(missing_ok=True)

    @staticmethod
    def _name(selections: tuple[str, ...]) -> str:
        import hashlib

        return hashlib.sha256("\0".join(selections).encode()).hexdigest()[:24] + ".json"

    def load(self, selections: tuple[str, ...]):
        """The stored composition of ``selections``, or None."""
        import json
        import os

        from omegaconf import OmegaConf

        where = self._dir()
        if where is None:
            return None
        try:
            with open(where / self._name(selections), encoding="utf-8") as f:
                entry = json.load(f)
            if entry["selections"] != list(selections):
                return None
            config = OmegaConf.create(entry["config"])
            OmegaConf.set_struct(config, bool(entry["struct"]))
        except Exception:  # noqa: BLE001 (any unreadable entry is a miss)
            return None
        with contextlib.suppress(OSError):  # in use: not pruned (a read-only cache is still read)
            os.utime(where)
        return config

    def store(self, selections: tuple[str, ...], config) -> None:
        import json
        import os
        import tempfile

        from omegaconf import OmegaConf

        where = self._dir()
        if where is None:
            return
        tmp = None
        try:
            self._prune(where)
            entry = {"selections": list(selections), "struct": bool(OmegaConf.is_struct(config)),
                     "config": OmegaConf.to_container(config, resolve=False)}
            text = json.dumps(entry)
            if json.loads(text) != entry:  # not plain JSON (an int key, a NaN): compose it each time instead
                return
            fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, where / self._name(selections))
            tmp = None
        except Exception:  # noqa: BLE001 (a cache that cannot be written is no cache, not an error)
            pass
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


class BackgroundValidator:
    """``target(*args)`` for each :meth:`submit`, in a second process, while this one composes and names the next
    configs. ``target`` (``"module:function"``, default :func:`_verdict`: verl's ``validate_config``) answers with
    a picklable verdict.

    Validating needs verl, and ``import verl`` (torch, tensordict, transformers) costs ~4.5 CPU-s: about as much
    as composing a recipe's 36 runs. A fresh interpreter started here (``python -c``: nothing of this process is
    shared or re-imported, unlike multiprocessing's spawn, which re-imports the main module) imports verl and
    checks each config it is sent (resolved, pickled, over a pipe of its own) while this process goes on;
    :meth:`results` waits for the verdicts, in the order sent. On 2 cores the two halves take about the same time,
    so a recipe is planned in about half the wall time. Its own output (verl's import notices) goes to a temporary
    file, shown only if it dies.
    """

    def __init__(self, target: str = "fgrpo_verl.config.compose:_verdict"):
        import os
        import subprocess
        import tempfile
        from multiprocessing.connection import Connection

        import fgrpo_verl

        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self._log = tempfile.TemporaryFile()
        root = str(Path(fgrpo_verl.__file__).resolve().parent.parent)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        code = ("import sys; from fgrpo_verl.config.compose import _validate_loop; "
                "_validate_loop(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])")
        self._process = subprocess.Popen(
            [sys.executable, "-c", code, str(to_child_r), str(from_child_w), target],
            pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, env=env,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._send, self._recv = Connection(to_child_w, readable=False), Connection(from_child_r, writable=False)
        self._sent = 0

    def submit(self, *args) -> None:
        """Send ``args`` to be checked; the verdict comes with :meth:`results` (None here: not known yet)."""
        self._send.send(args)
        self._sent += 1

    def results(self) -> list:
        """The verdicts of everything submitted, in order; then the process ends."""
        try:
            self._send.send(None)
            out = [self._recv.recv() for _ in range(self._sent)]
        except (EOFError, BrokenPipeError, ConnectionResetError):  # it died: say so, with its last words
            self._process.wait()
            self._log.seek(0)
            tail = self._log.read().decode(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"the process validating the configs with verl ended early (exit "
                               f"{self._process.returncode}): {tail[0] if tail else 'no output'}") from None
        finally:
            self.close()
        return out

    def close(self) -> None:
        """End the process (after :meth:`results` it has ended already) and free its pipes."""
        if self._process.poll() is None:
            self._process.terminate()
        self._process.wait()
        for conn in (self._send, self._recv):
            conn.close()
        self._log.close()


class InProcessValidator:
    """:class:`BackgroundValidator`'s interface, checking at once in this process: :meth:`submit` returns the
    verdict (so the caller can stop at the first bad config), :meth:`results` repeats them. Where verl is imported
    already (a test session, a notebook), a second interpreter would only import it again."""

    def __init__(self, target: str = "fgrpo_verl.config.compose:_verdict"):
        self._target = _load_target(target)
        self._verdicts: list = []

    def submit(self, *args):
        verdict = self._target(*args)
        self._verdicts.append(verdict)
        return verdict

    def results(self) -> list:
        return list(self._verdicts)

    def close(self) -> None:
        pass


# fewer configs than this are validated here: the second process pays verl's import as this one would, and the
# composing it would overlap is short
BACKGROUND_MIN_CONFIGS = 4


def start_validator(configs: int, target: str = "fgrpo_verl.config.compose:_verdict"):
    """For ``configs`` configs to check with ``target``: a :class:`BackgroundValidator`, or an
    :class:`InProcessValidator` when verl is imported here already or there are few of them."""
    if "verl" in sys.modules or configs < BACKGROUND_MIN_CONFIGS:
        return InProcessValidator(target)
    return BackgroundValidator(target)


def _load_target(target: str):
    import importlib

    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _verdict(config) -> str | None:
    """None when ``config`` validates, else the reason (a bug, not a bad config, with the exception's type)."""
    try:
        validate(config)
    except (ValueError, AssertionError) as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 (reported with the run's name by the caller)
        return f"{type(exc).__name__}: {exc}"
    return None


def _validate_loop(recv_fd: int, send_fd: int, target: str = "fgrpo_verl.config.compose:_verdict") -> None:
    """The checking process: ``target(*args)`` for each ``args`` received; ``None`` (or a closed pipe) ends it."""
    import queue
    import threading
    from multiprocessing.connection import Connection

    recv, send = Connection(recv_fd, writable=False), Connection(send_fd, readable=False)
    received: queue.Queue = queue.Queue()

    def read() -> None:
        # at once: a pipe holds one config's pickle (~100 kB) at most, and the parent must not wait for verl's
        # import here before it can send the next
        while True:
            try:
                args = recv.recv()
            except EOFError:  # the parent is gone
                args = None
            received.put(args)
            if args is None:
                return

    threading.Thread(target=read, daemon=True).start()
    import verl  # noqa: F401  (while the configs arrive)

    check = _load_target(target)
    while (args := received.get()) is not None:
        send.send(check(*args))


_VERL_OK = "All configuration checks passed successfully"


def validate(config) -> None:
    """Everything ``fgrpo-verl train`` checks before Ray starts: the verl version, the ``algorithm.fgrpo`` block
    and verl's own ``validate_config`` (the check ``main_ppo`` runs). verl's own checks are ``assert``s; a failing
    one is raised as a ``ValueError`` (bad input, not a bug) with verl's message."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from fgrpo_verl.integration.registration import ident_of, require_supported_verl
    from fgrpo_verl.integration.validation import WRAPPER_ID, check_fgrpo

    require_supported_verl()
    if ident_of(validate_config) != WRAPPER_ID:  # the plugin's wrapper checks it already (its warnings once)
        check_fgrpo(config)
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            # verl warns that the critic is off for any estimator but GAE: always true of fgrpo, nothing to do
            warnings.filterwarnings("ignore", message="Disabled critic", category=UserWarning)
            validate_config(config=config, use_reference_policy=need_reference_policy(config),
                            use_critic=need_critic(config))
    except AssertionError as exc:
        raise ValueError(f"verl's validate_config: {str(exc).strip() or 'a check failed'}") from exc
    finally:
        # verl prints a success line on stdout; anything else it printed is passed on (to stderr: stdout may
        # carry a command's output, e.g. `launch --dry-run`'s scripts)
        other = [line for line in printed.getvalue().splitlines() if line.strip() and _VERL_OK not in line]
        if other:
            print("\n".join(other), file=sys.stderr)
