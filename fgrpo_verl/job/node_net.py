"""A job's Ray nodes set up on each node (slurm/ray_cluster.sh): network, session directory, who joined.

- **Interface.** ``ray_cluster.sh`` gives every Ray node its Slurm ``NodeAddr`` as ``--node-ip-address``. verl's
  process groups do not use Ray's address: gloo (the CPU groups) picks an interface on its own, from the host
  name, which is the wrong network on multi-homed nodes and loopback where the host name maps to 127.0.1.1 (the
  case ``ray_cluster.sh`` refuses for Ray). So every node exports ``GLOO_SOCKET_IFNAME`` = the interface that
  holds its Ray address, before ``ray start``: Ray's workers (verl's ranks) inherit it. NCCL is not pinned:
  NodeAddr is often the management network, and NCCL pinned there would send every FSDP all-gather of a
  TCP-only cluster over it, while NCCL's own choice skips loopback and prefers InfiniBand. A value already set
  in the job's environment is kept for both (a site that knows its fabric, e.g. ``NCCL_SOCKET_IFNAME=ib0``).
- **Ports.** The head's ports (GCS, client server, dashboard) start at ``FGRPO_RAY_PORT_BASE``, derived from the
  job id; two jobs whose ids give the same block and that share the head node would collide, so
  :func:`port_base` moves to the next block (of 120) whose head ports are free on this host. Each node's own
  ports (node manager, object manager, metrics, dashboard agent, runtime env agent) only need to be free on that
  node (the others learn them from the GCS): the node's block when free there, else ports the OS hands out.
  Binding is the test, on all addresses. Two jobs starting on one host in the same instant can still race; the
  loser's ``ray start`` then fails with "address already in use" and the job fails (relaunch it).
- **Session directory.** Ray's session directory holds sockets and logs; on a shared node another user who
  pre-creates it (or plants a symlink there) could read the logs or hijack the sockets. So the job creates it 0700
  and refuses one that is a symlink, is owned by someone else or is open to group/others.
- **Joined nodes.** While it waits for the allocated nodes to join, ``ray_cluster.sh`` polls ``alive``: a driver
  connects with Ray's public ``ray.init(address=...)`` (to the Ray node of this host, the head's in a job), reads
  ``ray.nodes()`` and leaves; about a second a poll. A GCS that is not listening yet is waited for with plain TCP
  connects, for at most ``--timeout``: ``ray.init`` itself would wait for it for over a minute. Ray's token comes
  from the environment (``RAY_AUTH_TOKEN``), as for every driver.

    python -m fgrpo_verl.job.node_net base JOB_ID        # prints the port base (FGRPO_RAY_PORT_BASE)
    python -m fgrpo_verl.job.node_net ifname IP          # prints the interface holding IP
    python -m fgrpo_verl.job.node_net exec --ip IP --base B --index I -- ray start ...
    python -m fgrpo_verl.job.node_net private-dir DIR    # creates (or accepts) Ray's session directory
    python -m fgrpo_verl.job.node_net alive --address HOST:PORT [--timeout S]   # prints the alive nodes' IPs
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import socket
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

FIRST_PORT = 20000
BLOCK = 100
BLOCKS = 120
# offsets from the base: GCS, Ray client server, dashboard (the head's)
HEAD_PORTS = (0, 1, 2)
# a node's own ports: node manager, object manager, metrics export, dashboard agent (listen, gRPC), runtime env agent
NODE_PORT_FLAGS = (
    "--node-manager-port", "--object-manager-port", "--metrics-export-port",
    "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
)


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on all addresses of this host (nothing listens on it anywhere). With
    SO_REUSEADDR, as Ray's gRPC servers bind: connections of an ended job still in TIME_WAIT there do not count,
    which would otherwise move a job into the next job's block (where the two may race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def port_base(job_id: int) -> int:
    """The first block ``FIRST_PORT + BLOCK * ((job_id + k) mod BLOCKS)``, k = 0, 1, ..., whose head ports are free
    here; the job's own block when all are taken (Ray then reports the clash)."""
    for k in range(BLOCKS):
        base = FIRST_PORT + BLOCK * ((job_id + k) % BLOCKS)
        if all(port_free(base + offset) for offset in HEAD_PORTS):
            return base
    return FIRST_PORT + BLOCK * (job_id % BLOCKS)


def node_ports(base: int, index: int) -> list[int]:
    """Node ``index``'s six ports: its block ``base + 10 + 10 * (index mod 9)`` when free here, else free ports
    from the OS."""
    first = base + 10 + 10 * (index % 9)
    block = [first + i for i in range(len(NODE_PORT_FLAGS))]
    if all(port_free(p) for p in block):
        return block
    with contextlib.ExitStack() as stack:  # all held at once: six distinct ports
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in NODE_PORT_FLAGS]
        for sock in socks:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in socks]


def interface_of(ip: str) -> str:
    """The name of the network interface that holds IPv4 address ``ip`` on this host: the one with that address,
    else the one whose network contains it (loopback's 127.0.0.0/8 holds 127.0.0.2 without listing it)."""
    import psutil

    wanted = ipaddress.ip_address(ip)
    interfaces = [(name, a) for name, addrs in psutil.net_if_addrs().items() for a in addrs if a.family == socket.AF_INET]
    for name, a in interfaces:
        if a.address == ip:
            return name
    for name, a in interfaces:
        if a.netmask and wanted in ipaddress.ip_network(f"{a.address}/{a.netmask}", strict=False):
            return name
    raise ValueError(f"no network interface of this host holds {ip} (the node's Slurm NodeAddr): check "
                     "`scontrol show node` against `ip addr` on the node")


def interface_env(ip: str, environ=os.environ) -> dict[str, str]:
    """``GLOO_SOCKET_IFNAME`` = the interface of ``ip`` (kept when already set), plus ``NCCL_SOCKET_IFNAME`` only
    when the environment sets it: NCCL's own choice beats the NodeAddr's network, which may be a slow management
    link."""
    env = {"GLOO_SOCKET_IFNAME": environ.get("GLOO_SOCKET_IFNAME") or interface_of(ip)}
    if environ.get("NCCL_SOCKET_IFNAME"):
        env["NCCL_SOCKET_IFNAME"] = environ["NCCL_SOCKET_IFNAME"]
    return env


def ensure_private_dir(path: str | Path) -> Path:
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=False)
    except FileExistsError:
        pass
    except FileNotFoundError as exc:
        raise ValueError(f"{path}: parent directory {path.parent} does not exist") from exc
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path}: not a plain directory (a symlink or a file): refusing to put Ray's session there")
    if info.st_uid != os.geteuid():
        raise ValueError(f"{path}: owned by uid {info.st_uid}, not by this job's user (uid {os.geteuid()})")
    if info.st_mode & 0o077:
        raise ValueError(f"{path}: mode {stat.S_IMODE(info.st_mode):o} lets other users in; expected 700")
    return path


def alive_node_ips(address: str, timeout_s: float = 10.0) -> list[str]:
    """IPs of the alive nodes of the Ray cluster whose GCS is at ``address``; OSError when nothing listens there
    within ``timeout_s`` (a head still starting gets that long)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
    import ray

    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        return sorted({node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"]})
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fgrpo_verl.job.node_net", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("base", help="print the job's Ray port base").add_argument("job_id", type=int)
    sub.add_parser("ifname", help="print the interface holding IP").add_argument("ip")
    run = sub.add_parser("exec", help="set GLOO_SOCKET_IFNAME and this node's ports, then exec the command")
    run.add_argument("--ip", required=True)
    run.add_argument("--base", type=int, required=True)
    run.add_argument("--index", type=int, required=True)
    run.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("private-dir", help="create (or accept) a directory only this user can use").add_argument("dir")
    alive = sub.add_parser("alive", help="print the IP of every alive node of a running Ray cluster")
    alive.add_argument("--address", required=True, help="GCS address of the head node, HOST:PORT")
    alive.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the GCS to answer")
    args = parser.parse_args(argv)
    if args.command == "alive":
        for ip in alive_node_ips(args.address, args.timeout):
            print(ip)
        return 0
    try:
        if args.command == "private-dir":
            ensure_private_dir(args.dir)
        elif args.command in ("base", "ifname"):
            print(port_base(args.job_id) if args.command == "base" else interface_of(args.ip))
        if args.command in ("private-dir", "base", "ifname"):
            return 0
        command = list(args.command[1:] if args.command[:1] == ["--"] else args.command)
        if not command:
            parser.error("exec needs a command after --")
        os.environ.update(interface_env(args.ip))
        command += [f"{flag}={port}" for flag, port in zip(NODE_PORT_FLAGS, node_ports(args.base, args.index))]
    except (ValueError, OSError) as exc:
        print(f"fgrpo node_net: error: {exc}", file=sys.stderr)
        return 1 if args.command == "private-dir" else 2
    os.execvp(command[0], command)
    return 127  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main())
