# shellcheck shell=bash
# Time limits and preemption notices for a training job. Sourced by the job script (job.sbatch.template):
#
#   fgrpo_watch_stop_signal     # first thing in the job: stale stop files removed, USR1 handled
#   fgrpo_ray_up                # (ray_cluster.sh)
#   fgrpo_train CMD...          # the driver in the background; requeues the job when it stopped on request
#
# `#SBATCH --signal=B:USR1@<lead>` makes Slurm send USR1 to this shell <lead> seconds before the time limit
# (up to a minute early: Slurm checks limits periodically); a preempting site may send it too. On USR1:
#   1. $FGRPO_STOP_FILE is created; the trainer (fgrpo_verl/job/preempt.py) sees it after the current step,
#      saves that step's checkpoint, leaves verl's loop and writes $FGRPO_STOP_FILE.ack;
#   2. the driver exits 0 and this job runs `scontrol requeue $SLURM_JOB_ID`: the same script starts again and
#      resumes from that checkpoint. No step is lost or repeated.
# Safety net: if the driver has not stopped $FGRPO_STOP_GRACE seconds after USR1 (a step longer than the lead),
# the job requeues itself anyway, provided this start advanced the checkpoint (steps after it are recomputed on
# the next start; W&B continuity: docs/slurm.md). A start that made no progress is not requeued (it would loop
# forever): it ends at the time limit and `fgrpo-verl launch R --status` reports it; raise the time limit.
#
# Settings (exported by the rendered job): FGRPO_STOP_FILE, FGRPO_STOP_GRACE (seconds), FGRPO_CHECKPOINT_DIR.

fgrpo_lc_log() { echo "[fgrpo $(date -u +%H:%M:%S)] $*"; }

# the step in latest_checkpointed_iteration.txt, 0 when none
fgrpo_checkpointed_step() {
    local f=$FGRPO_CHECKPOINT_DIR/latest_checkpointed_iteration.txt
    if [[ -s $f ]]; then tr -dc '0-9' <"$f"; else echo 0; fi
}

# W&B continuity at the start of a (re)started job, before anything logs (docs/slurm.md, Lifecycle):
# - offline: the run's earlier offline folders lose the steps after the checkpoint this start resumes from
#   (what a hard-killed start logged past it); fgrpo_verl/job/wandb_offline.py
# - online with FGRPO_WANDB_REWIND=1 (W&B's rewind must be enabled for your account): W&B rewinds the run to
#   that checkpoint (WANDB_RESUME_FROM=<id>?_step=<k>, which excludes WANDB_RESUME)
fgrpo_wandb_continue() {
    # W&B writes its buffered records every 15 s by default; a start killed without warning loses what is not
    # written (docs/slurm.md, "What a hard kill loses"). Every second instead, unless you chose a value.
    export WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL=${WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL:-1}
    local k
    k=$(fgrpo_checkpointed_step)
    if [[ ${WANDB_MODE:-} == offline ]]; then
        # a W&B file it cannot read or rewrite (damaged mid-file, read-only) must not stop training on every
        # start: the run goes on, and the log says what to check before `wandb sync`
        "${FGRPO_PYTHON:-python3}" -m fgrpo_verl.job.wandb_offline trim "${WANDB_DIR:-$PWD}" "$WANDB_RUN_ID" "$k" ||
            fgrpo_lc_log "W&B: the offline trim failed (above); training continues, but run $WANDB_RUN_ID's" \
                "earlier offline folders may keep steps after checkpoint $k that this start logs again:" \
                "fix or remove them before wandb sync (docs/slurm.md, W&B continuity)"
    elif [[ ${FGRPO_WANDB_REWIND:-0} == 1 ]] && ((k > 0)); then
        export WANDB_RESUME_FROM="$WANDB_RUN_ID?_step=$k"
        unset WANDB_RESUME
        fgrpo_lc_log "W&B: rewinding run $WANDB_RUN_ID to step $k"
    fi
}

fgrpo_watch_stop_signal() {
    [[ -n ${FGRPO_STOP_FILE:-} ]] || { echo "fgrpo: FGRPO_STOP_FILE is not set" >&2; return 1; }
    # a request or an acknowledgement left by an earlier start must not stop this one
    rm -f "$FGRPO_STOP_FILE" "$FGRPO_STOP_FILE.ack"
    FGRPO_STOP_REQUESTED=0
    FGRPO_START_STEP=$(fgrpo_checkpointed_step)
    trap fgrpo_on_stop_signal USR1
}

fgrpo_on_stop_signal() {
    ((FGRPO_STOP_REQUESTED == 0)) || return 0
    FGRPO_STOP_REQUESTED=1
    fgrpo_lc_log "got USR1 (time limit ahead or preemption notice): asking the trainer to checkpoint at the" \
        "next step boundary and stop"
    mkdir -p "$(dirname "$FGRPO_STOP_FILE")"
    : >"$FGRPO_STOP_FILE"
    local grace=${FGRPO_STOP_GRACE:-240} job=$SLURM_JOB_ID start=$FGRPO_START_STEP
    (
        sleep "$grace"
        if (($(fgrpo_checkpointed_step) > start)); then
            fgrpo_lc_log "the trainer did not stop within ${grace} s of USR1: requeueing now; steps after" \
                "checkpoint $(fgrpo_checkpointed_step) are recomputed on the next start"
            scontrol requeue "$job"
        else
            fgrpo_lc_log "the trainer did not stop within ${grace} s of USR1 and saved nothing in this start:" \
                "not requeueing (it would never progress); raise the time limit or slurm.signal_lead_s"
        fi
    ) &
    FGRPO_STOP_TIMER=$!
}

fgrpo_train() {
    "$@" &
    local driver=$! rc
    while true; do
        rc=0
        wait "$driver" || rc=$?
        # > 128 with the driver alive: `wait` was interrupted by USR1; keep waiting
        if ((rc > 128)) && kill -0 "$driver" 2>/dev/null; then continue; fi
        # interrupted just as the driver ended: its own status is still to be collected
        if ((rc > 128)); then wait "$driver" 2>/dev/null && rc=0 || { local r=$?; ((r == 127)) || rc=$r; }; fi
        break
    done
    trap - USR1
    [[ -z ${FGRPO_STOP_TIMER:-} ]] || kill "$FGRPO_STOP_TIMER" 2>/dev/null || true
    # the ack comes after the stop step's checkpoint: a driver that fails after it (Ray/vLLM teardown) still
    # stopped cleanly, and the run continues from that checkpoint
    if [[ -s $FGRPO_STOP_FILE.ack ]]; then
        ((rc == 0)) || fgrpo_lc_log "training exited with status $rc after its stop checkpoint: requeueing anyway"
        fgrpo_lc_log "stopped on request after step $(tr -dc '0-9' <"$FGRPO_STOP_FILE.ack") (checkpoint" \
            "$(fgrpo_checkpointed_step)): requeueing job $SLURM_JOB_ID"
        fgrpo_ray_down "$rc"  # non-zero: the failed teardown's Ray logs are kept
        scontrol requeue "$SLURM_JOB_ID" || {
            fgrpo_lc_log "scontrol requeue failed: resubmit with fgrpo-verl launch (it resumes)"
            return 1
        }
        return 0
    fi
    if ((rc != 0)); then
        fgrpo_lc_log "training exited with status $rc at checkpoint $(fgrpo_checkpointed_step)"
        return "$rc"
    fi
    fgrpo_lc_log "training finished at checkpoint $(fgrpo_checkpointed_step)"
}
