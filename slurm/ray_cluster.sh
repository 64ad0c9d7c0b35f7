# shellcheck shell=bash
# One Ray cluster over all nodes of a Slurm allocation. Sourced by the sbatch scripts in this folder:
#
#   source ray_cluster.sh
#   fgrpo_ray_up        # head on the first node, one worker per other node; waits until all have joined
#   ...driver...        # RAY_ADDRESS is exported: ray.init() / verl connect to this cluster
#   fgrpo_ray_down      # stops every Ray step (also run by the EXIT trap)
#
# Why it is written this way:
# - Node list from `scontrol show hostnames` (one array element per node; verl's tutorial puts all names in
#   one element, verl issue #548).
# - Every node gets an explicit --node-ip-address: Slurm's NodeAddr for that node (resolved when it is a
#   name). Ray otherwise guesses its IP by probing a route to an outside address, which picks the wrong
#   interface on multi-homed nodes (and would send traffic off a test machine).
# - Ray token authentication stays on: a fresh random token per job (even when RAY_AUTH_TOKEN is set in the
#   submitting shell; FGRPO_RAY_AUTH_TOKEN overrides it on purpose), exported as RAY_AUTH_TOKEN to this
#   script's environment and from there to `srun` steps. It never appears on a command line (visible in
#   `ps`), in a file or in the log.
# - Ray's session directory is created 0700 on every node and refused when it is a symlink or not ours.
# - On a multi-node job the head's address must not be loopback (a node named after 127.0.1.1 in /etc/hosts
#   would make every worker dial itself); FGRPO_ALLOW_LOOPBACK=1 is for one-machine test clusters only.
# - Commands run through $FGRPO_PYTHON (the launcher's interpreter), not whatever `python`/`ray` PATH finds.
# - When the job fails, each node's Ray logs are copied to $FGRPO_LOG_DIR/ray-<job id>-<node>/ before the
#   session directories are removed.
# - Ray runs with --block inside `srun --overlap` steps: when a step ends, its Ray processes end with it;
#   nothing daemonizes out of the job.
# - Ports are derived from the job id, so two jobs (or a local `ray start` of someone else) sharing a host
#   do not collide on Ray's default ports; the head moves to the next free block when another job holds its
#   block, and each node takes free ports of its own when its block is taken there
#   (fgrpo_verl/job/node_net.py).
# - verl's gloo groups would pick their own interface (the wrong one on multi-homed nodes, loopback where the
#   host name maps to 127.0.1.1): every node exports GLOO_SOCKET_IFNAME = the interface of its Ray address
#   before `ray start`. NCCL chooses its own (the Ray address may be a slow management network); export
#   NCCL_SOCKET_IFNAME to choose for it (node_net.py; values set in your environment are kept).
# - Jobs run offline from the Hugging Face Hub (HF_HUB_OFFLINE=1 unless you set it): every rank of every start
#   and requeue would otherwise ask the Hub for the model; download it first (docs/slurm.md §2).
#
# Settings (environment; all optional):
#   FGRPO_PYTHON             interpreter of the fgrpo-verl install (the launcher renders it; default python3)
#   FGRPO_RAY_CMD            command that runs Ray's CLI, e.g. "apptainer exec img.sif ray"
#                            (default: $FGRPO_PYTHON -m ray.scripts.scripts)
#   FGRPO_RAY_AUTH_TOKEN     use this Ray token instead of a fresh one
#   FGRPO_LOG_DIR            where a failed job's Ray logs are copied (default: the job's working directory)
#   FGRPO_RAY_JOIN_TIMEOUT   seconds to wait for every node to join (default 300)
#   FGRPO_RAY_PORT_BASE      first of the ~100 ports this job uses (default 20000 + 100 * (job id % 120), or
#                            the next block whose head ports are free on the head node)
#   FGRPO_RAY_NUM_CPUS       CPUs each node offers to Ray (default: the Ray step's allocation, --cpus-per-task)
#   FGRPO_GPUS_PER_NODE      GPUs each node offers to Ray and to verl (default from SLURM_GPUS_ON_NODE /
#                            SLURM_GPUS_PER_NODE; required when Slurm allocated no GPUs)
#   FGRPO_RAY_TMPDIR         parent of Ray's per-job session directory (default /tmp; keep it short:
#                            Ray's socket paths must fit in 107 characters)

fgrpo_log() { echo "[fgrpo-ray $(date -u +%H:%M:%S)] $*"; }
fgrpo_fail() { echo "[fgrpo-ray $(date -u +%H:%M:%S)] ERROR: $*" >&2; return 1; }

# IPv4 address Ray should use for Slurm node $1: its NodeAddr, resolved if it is a host name.
fgrpo_node_ip() {
    local addr
    addr=$(scontrol show node "$1" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
    [[ -n $addr ]] || { fgrpo_fail "scontrol show node $1 gave no NodeAddr"; return 1; }
    if [[ $addr =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
        echo "$addr"
    else
        getent ahostsv4 "$addr" | awk 'NR == 1 {print $1}' | grep . \
            || { fgrpo_fail "cannot resolve NodeAddr '$addr' of node $1"; return 1; }
    fi
}

# GPUs per node: FGRPO_GPUS_PER_NODE, else Slurm's count ("8" or "h100:8").
fgrpo_gpus_per_node() {
    local g=${FGRPO_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-}}}
    g=${g##*:}
    [[ $g =~ ^[0-9]+$ ]] || {
        fgrpo_fail "cannot tell GPUs per node: Slurm allocated none (SLURM_GPUS_ON_NODE unset); request them" \
            "with '#SBATCH --gpus-per-node=N' or set FGRPO_GPUS_PER_NODE"
        return 1
    }
    echo "$g"
}

fgrpo_ray_up() {
    [[ -n ${SLURM_JOB_ID:-} ]] || { fgrpo_fail "not inside a Slurm job (SLURM_JOB_ID unset)"; return 1; }
    local timeout=${FGRPO_RAY_JOIN_TIMEOUT:-300} py=${FGRPO_PYTHON:-python3}
    local -a ray_cmd
    if [[ -n ${FGRPO_RAY_CMD:-} ]]; then read -ra ray_cmd <<<"$FGRPO_RAY_CMD"; else ray_cmd=("$py" -m ray.scripts.scripts); fi
    # the job's block of ports, moved on when another job on this (the head) node holds it
    FGRPO_RAY_PORT_BASE=${FGRPO_RAY_PORT_BASE:-$("$py" -m fgrpo_verl.job.node_net base "$SLURM_JOB_ID")}
    # Each Ray step gets all of its node's allocated CPUs: under CPU binding (task/affinity, task/cgroup) a
    # smaller step would pin Ray and every worker it forks onto that many cores. Ray is told the same number,
    # so it never schedules more CPU work than the step may use. --cpus-per-task is the same on every node;
    # without it (e.g. an --exclusive job) the batch node's count stands for all nodes.
    local step_cpus=${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-1}}
    local cpus=${FGRPO_RAY_NUM_CPUS:-$step_cpus} gpus
    gpus=$(fgrpo_gpus_per_node) || return 1
    export FGRPO_GPUS_PER_NODE=$gpus

    mapfile -t FGRPO_NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
    FGRPO_NODE_IPS=()
    local node
    for node in "${FGRPO_NODES[@]}"; do
        FGRPO_NODE_IPS+=("$(fgrpo_node_ip "$node")") || return 1
    done
    local head_ip=${FGRPO_NODE_IPS[0]} gcs_port=$FGRPO_RAY_PORT_BASE
    if ((${#FGRPO_NODES[@]} > 1)) && [[ $head_ip == 127.* ]] && [[ ${FGRPO_ALLOW_LOOPBACK:-0} != 1 ]]; then
        fgrpo_fail "head node ${FGRPO_NODES[0]} resolves to the loopback address $head_ip: the other nodes" \
            "cannot reach it. Give the node a routable NodeAddr in slurm.conf (or fix /etc/hosts)."
        return 1
    fi
    export FGRPO_HEAD_NODE=${FGRPO_NODES[0]} FGRPO_HEAD_IP=$head_ip
    export RAY_ADDRESS="$head_ip:$gcs_port"
    export FGRPO_RAY_SESSION_DIR=${FGRPO_RAY_TMPDIR:-/tmp}/fgrpo-ray-$SLURM_JOB_ID

    # Token auth on, with a token private to this job (Ray reads RAY_AUTH_TOKEN before any file).
    # A token inherited from the submitting shell may be shared with other clusters: never reuse it.
    export RAY_AUTH_MODE=token
    if [[ -n ${FGRPO_RAY_AUTH_TOKEN:-} ]]; then
        RAY_AUTH_TOKEN=$FGRPO_RAY_AUTH_TOKEN
    else
        RAY_AUTH_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
    fi
    export RAY_AUTH_TOKEN
    # the model comes from a local directory or the Hugging Face cache, never from the Hub (docs/slurm.md §2)
    export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}

    fgrpo_log "job $SLURM_JOB_ID: ${#FGRPO_NODES[@]} node(s) ${FGRPO_NODES[*]} (${FGRPO_NODE_IPS[*]});" \
        "head ${FGRPO_NODES[0]} at $RAY_ADDRESS; $cpus CPU(s), $gpus GPU(s) per node"
    trap 'fgrpo_ray_down $?' EXIT
    trap 'fgrpo_log "got SIGTERM (preemption, requeue or scancel): stopping Ray"; exit 143' TERM

    FGRPO_RAY_STEP_PIDS=()
    srun --overlap --nodes="${#FGRPO_NODES[@]}" --ntasks-per-node=1 --cpus-per-task="$step_cpus" \
        "$py" -m fgrpo_verl.job.node_net private-dir "$FGRPO_RAY_SESSION_DIR" || {
        fgrpo_fail "cannot create a private Ray session directory $FGRPO_RAY_SESSION_DIR on every node"
        return 1
    }
    # GPUs: a step gets all of the job's GPUs on its node by default. node_net exec sets the node's
    # gloo interface and appends its own ports, then execs Ray (fgrpo_verl/job/node_net.py).
    srun --overlap --nodes=1 --ntasks=1 --cpus-per-task="$step_cpus" -w "${FGRPO_NODES[0]}" \
        "$py" -m fgrpo_verl.job.node_net exec --ip "$head_ip" --base "$FGRPO_RAY_PORT_BASE" --index 0 -- \
        "${ray_cmd[@]}" start --head --block --node-ip-address="$head_ip" --port="$gcs_port" \
        --num-cpus="$cpus" --num-gpus="$gpus" --include-dashboard=false --dashboard-port=$((FGRPO_RAY_PORT_BASE + 2)) --disable-usage-stats \
        --ray-client-server-port=$((FGRPO_RAY_PORT_BASE + 1)) --temp-dir="$FGRPO_RAY_SESSION_DIR/0" &
    FGRPO_RAY_STEP_PIDS+=($!)

    local i
    for ((i = 1; i < ${#FGRPO_NODES[@]}; i++)); do
        srun --overlap --nodes=1 --ntasks=1 --cpus-per-task="$step_cpus" -w "${FGRPO_NODES[i]}" \
            "$py" -m fgrpo_verl.job.node_net exec --ip "${FGRPO_NODE_IPS[i]}" --base "$FGRPO_RAY_PORT_BASE" \
            --index "$i" -- \
            "${ray_cmd[@]}" start --block --address="$RAY_ADDRESS" --node-ip-address="${FGRPO_NODE_IPS[i]}" \
            --num-cpus="$cpus" --num-gpus="$gpus" --disable-usage-stats --temp-dir="$FGRPO_RAY_SESSION_DIR/$i" &
        FGRPO_RAY_STEP_PIDS+=($!)
    done
    # the driver (this shell, on the head node) uses the head's gloo interface too; set only now, so that the
    # Ray steps above chose their own node's interface. NCCL is left to choose (node_net.py says why).
    if [[ -z ${GLOO_SOCKET_IFNAME:-} ]]; then
        GLOO_SOCKET_IFNAME=$("$py" -m fgrpo_verl.job.node_net ifname "$head_ip") || return 1
        export GLOO_SOCKET_IFNAME
    fi
    fgrpo_ray_wait "$timeout"
}

# Wait until every allocated node has an alive Ray node at its IP. Fails naming the missing node(s) when a
# node's Ray step exits early or when the timeout passes; never waits forever.
fgrpo_ray_wait() {
    local timeout=$1 start=$SECONDS missing i joined
    while true; do
        # bounded: a driver that cannot finish connecting must not hold the wait past its own timeout
        joined=$(timeout 60 "${FGRPO_PYTHON:-python3}" -m fgrpo_verl.job.node_net alive --address "$RAY_ADDRESS" \
            2>/dev/null || true)
        missing=()
        for ((i = 0; i < ${#FGRPO_NODES[@]}; i++)); do
            grep -qxF "${FGRPO_NODE_IPS[i]}" <<<"$joined" || missing+=("${FGRPO_NODES[i]} (${FGRPO_NODE_IPS[i]})")
        done
        if ((${#missing[@]} == 0)); then
            fgrpo_log "all ${#FGRPO_NODES[@]} node(s) joined the Ray cluster after $((SECONDS - start)) s"
            return 0
        fi
        for ((i = 0; i < ${#FGRPO_RAY_STEP_PIDS[@]}; i++)); do
            if ! kill -0 "${FGRPO_RAY_STEP_PIDS[i]}" 2>/dev/null; then
                local rc=0
                wait "${FGRPO_RAY_STEP_PIDS[i]}" || rc=$?
                fgrpo_fail "the Ray step on node ${FGRPO_NODES[i]} (${FGRPO_NODE_IPS[i]}) exited with status $rc" \
                    "before joining; its output is above in this log. Still missing: ${missing[*]}"
                return 1
            fi
        done
        if ((SECONDS - start >= timeout)); then
            fgrpo_fail "node(s) ${missing[*]} did not join the Ray cluster at $RAY_ADDRESS within ${timeout} s" \
                "(FGRPO_RAY_JOIN_TIMEOUT). Check that Ray runs on them, that they reach the head at $RAY_ADDRESS," \
                "and the raylet logs under $FGRPO_RAY_SESSION_DIR on those nodes (docs/slurm.md, Troubleshooting)."
            return 1
        fi
        sleep 2
    done
}

# fgrpo_ray_down [STATUS]: stop the Ray steps; a non-zero STATUS (the job's) first saves every node's Ray logs.
fgrpo_ray_down() {
    local status=${1:-0} pid i
    trap - EXIT
    # unset (Ray never started) or empty: nothing to stop
    [[ -n ${FGRPO_RAY_STEP_PIDS[*]+x} && ${#FGRPO_RAY_STEP_PIDS[@]} -gt 0 ]] || return 0
    fgrpo_log "stopping Ray on ${#FGRPO_RAY_STEP_PIDS[@]} node(s)"
    # Workers first, head last; `ray start --block` stops its processes on SIGTERM.
    for ((i = ${#FGRPO_RAY_STEP_PIDS[@]} - 1; i >= 0; i--)); do
        kill -TERM "${FGRPO_RAY_STEP_PIDS[i]}" 2>/dev/null || true
    done
    for pid in "${FGRPO_RAY_STEP_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    FGRPO_RAY_STEP_PIDS=()
    if ((status != 0)); then
        local dest=${FGRPO_LOG_DIR:-$PWD}
        fgrpo_log "job failed (status $status): copying Ray logs to $dest/ray-$SLURM_JOB_ID-<node>/"
        # shellcheck disable=SC2016
        srun --overlap --nodes="${#FGRPO_NODES[@]}" --ntasks-per-node=1 bash -c \
            'mkdir -p "$2/ray-$SLURM_JOB_ID-$SLURMD_NODENAME" && cp -r "$1"/*/session_*/logs "$2/ray-$SLURM_JOB_ID-$SLURMD_NODENAME/" 2>/dev/null || true' \
            _ "$FGRPO_RAY_SESSION_DIR" "$dest" || true
    fi
    # Ray's session directories live on every node's local disk: one short step removes them all.
    srun --overlap --nodes="${#FGRPO_NODES[@]}" --ntasks-per-node=1 rm -rf "$FGRPO_RAY_SESSION_DIR" 2>/dev/null || true
    fgrpo_log "Ray stopped"
}
