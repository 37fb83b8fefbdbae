#!/usr/bin/env bash
# A real Slurm cluster on one machine, for development and tests (facts: ../shared/SLURM-NOTES.md).
#
#   scripts/slurm-dev-cluster.sh up     [--dir DIR]   install (apt) if missing, start, wait until idle
#   scripts/slurm-dev-cluster.sh down   [--dir DIR]   stop exactly the daemons `up` started (pid files),
#                                                     waiting for each to exit; the munged a dev cluster
#                                                     started goes with the last cluster on the host
#   scripts/slurm-dev-cluster.sh status [--dir DIR]   exit 0 when every daemon runs and Slurm answers
#
# `up --plugins` turns on msched's Slurm plugins: `msched plugin install --dir DIR` writes cli_filter.lua
# and job_submit.lua beside slurm.conf, and slurm.conf gets CliFilterPlugins=cli_filter/lua and
# JobSubmitPlugins=lua. Plain `up` runs without them (a running cluster is restarted to match); the
# Python that runs msched is MSCHED_PYTHON, else the repository's .venv.
#
# `up --accounting` adds what real sites run for job history: a private MariaDB (datadir, socket and
# port inside DIR) and slurmdbd, so `sacct` works (installs slurmdbd and mariadb-server with apt).
# The choice is remembered in DIR: later `up`/`down` on that DIR include the accounting daemons.
#
# One slurmctld and four `slurmd -N nX` on loopback emulate four nodes with typed GPUs, each tagged
# with a node feature equal to its GPU type (msched retypes a pending job through its features):
#   n1 a100:4   n2 titanv:4   n3 rtx2080ti:4   n4 titanxp:4
# SLURM_DEV_SCHEDULER=builtin gives SchedulerType=sched/builtin instead of Slurm's default sched/backfill.
# Everything (config, state, logs, pid files, fake GPU device files, the job completion file) lives in
# DIR (default: .slurm-dev in the repository). Ports derive from DIR so clusters in different
# directories can coexist (the next free ten when another process listens there; the choice is kept
# in DIR/port-base); SLURM_DEV_PORT_BASE overrides. `up` prints the line to eval:
#   export SLURM_CONF=DIR/slurm.conf
# Daemons run as root (SlurmUser=root); jobs run as the user who submitted them.
set -euo pipefail

usage() { echo "usage: $0 up|down|status [--dir DIR] [--accounting] [--plugins] [--node-gpus NODE=N ...] [--shards NODE=K ...] [--partition-per-type]" >&2; exit 2; }

ACTION="${1:-}"; [[ -n "$ACTION" ]] || usage; shift
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$REPO/.slurm-dev"
ACCOUNTING=0
PLUGINS=0
NODE_GPUS=()
PARTITION_PER_TYPE=0
NODE_SHARDS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dir) [[ $# -ge 2 ]] || usage; DIR="$2"; shift 2 ;;
        --dir=*) DIR="${1#--dir=}"; shift ;;
        --accounting) ACCOUNTING=1; shift ;;
        --plugins) PLUGINS=1; shift ;;
        # a node with another GPU count (e.g. --node-gpus n2=2: titanv on 2-GPU nodes), for shape tests
        --node-gpus) [[ $# -ge 2 && "$2" =~ ^n[1-4]=[1-8]$ ]] || usage; NODE_GPUS+=("$2"); shift 2 ;;
        # each GPU type also gets a partition of its own (named as the type), as sites that split types do
        --partition-per-type) PARTITION_PER_TYPE=1; shift ;;
        # a node whose GPUs can also be shared (gres/shard, K shards per GPU), also in partition `shared`
        --shards) [[ $# -ge 2 && "$2" =~ ^n[1-4]=[1-8]$ ]] || usage; NODE_SHARDS+=("$2"); shift 2 ;;
        *) usage ;;
    esac
done
case "$ACTION" in up|down|status) ;; *) usage ;; esac

NODES=(n1 n2 n3 n4)
declare -A GPU_TYPE=([n1]=a100 [n2]=titanv [n3]=rtx2080ti [n4]=titanxp)
GPUS_PER_NODE=4
declare -A NODE_GPU_COUNT=([n1]=$GPUS_PER_NODE [n2]=$GPUS_PER_NODE [n3]=$GPUS_PER_NODE [n4]=$GPUS_PER_NODE)
for item in "${NODE_GPUS[@]}"; do NODE_GPU_COUNT[${item%%=*}]="${item#*=}"; done
declare -A SHARDS_PER_GPU=()
for item in "${NODE_SHARDS[@]}"; do SHARDS_PER_GPU[${item%%=*}]="${item#*=}"; done
CPUS_PER_NODE=16
UP_TIMEOUT_S="${SLURM_DEV_UP_TIMEOUT:-60}"
# SchedulerType (slurm.conf): backfill, Slurm's default, or builtin (strict priority order). Read when a
# fresh controller is configured; a running cluster keeps its own (use another --dir to compare both).
SCHEDULER="${SLURM_DEV_SCHEDULER:-backfill}"
case "$SCHEDULER" in backfill|builtin) ;; *) echo "slurm-dev: error: SLURM_DEV_SCHEDULER must be backfill or builtin" >&2; exit 2 ;; esac

log() { echo "slurm-dev: $*" >&2; }
die() { echo "slurm-dev: error: $*" >&2; exit 1; }

# A pid is "alive" when ps knows it, it is not a zombie and its command is the expected daemon.
alive() {  # alive PID NAME
    local stat comm
    stat="$(ps -o stat= -p "$1" 2>/dev/null | tr -d ' ')" || return 1
    [[ -n "$stat" && "$stat" != Z* ]] || return 1
    comm="$(ps -o comm= -p "$1" 2>/dev/null | tr -d ' ')"
    [[ "$comm" == "$2"* ]]
}

pid_of() {  # pid_of PIDFILE -> prints the pid or nothing
    [[ -s "$1" ]] && tr -dc '0-9' <"$1" || true
}

daemon_alive() {  # daemon_alive PIDFILE NAME
    local pid; pid="$(pid_of "$1")"
    [[ -n "$pid" ]] && alive "$pid" "$2"
}

# Bounded polling: run a command until it succeeds or the deadline passes.
wait_until() {  # wait_until TIMEOUT_S CMD...
    local deadline=$((SECONDS + $1)); shift
    while ! "$@"; do
        (( SECONDS < deadline )) || return 1
        sleep 0.1
    done
}

resolve_dir() {
    mkdir -p "$DIR"
    DIR="$(cd "$DIR" && pwd)"
    CONF="$DIR/slurm.conf"
    RUN="$DIR/run"
    if [[ -n "${SLURM_DEV_PORT_BASE:-}" ]]; then
        PORT_BASE="$SLURM_DEV_PORT_BASE"
    elif [[ "$(cat "$DIR/port-base" 2>/dev/null)" =~ ^[0-9]{5}$ ]]; then
        PORT_BASE="$(cat "$DIR/port-base")"      # chosen by an earlier `up` (choose_port_base)
    else
        PORT_BASE="$(hashed_port_base)"
    fi
}

# 20000-31999: below Linux's ephemeral range (32768-60999), where a client's outgoing connection
# could already hold a port the daemon then fails to bind. Ten ports per directory.
hashed_port_base() { echo $(( 20000 + ($(printf '%s' "$DIR" | cksum | cut -d' ' -f1) % 1200) * 10 )); }

ports_listening() {  # ports_listening LO HI: succeed when a TCP socket listens on a port in LO..HI
    local f _ addr _ st _
    for f in /proc/net/tcp /proc/net/tcp6; do
        [[ -r "$f" ]] || continue
        while read -r _ addr _ st _; do
            [[ "$st" == 0A && "$addr" == *:* ]] || continue
            local port=$((16#${addr##*:}))
            (( port >= $1 && port <= $2 )) && return 0
        done < <(tail -n +2 "$f")
    done
    return 1
}

# A fresh controller's ports: the directory's hashed base unless something already listens there (two
# directories can hash alike: a test's tmp_path met the plugin cluster's base, and its slurmctld asked
# the other cluster's controller), else the next free ten. Remembered in DIR/port-base so later
# `up`/`down`/`status` agree. Ports +8/+9 belong to this directory's own MariaDB/slurmdbd when they run.
choose_port_base() {
    [[ -n "${SLURM_DEV_PORT_BASE:-}" ]] && return 0
    local top=$((PORT_BASE + 9)) tries=0
    daemon_alive "$RUN/mariadbd.pid" mariadbd && top=$((PORT_BASE + 7))
    if ports_listening "$PORT_BASE" "$top"; then
        [[ $top -eq $((PORT_BASE + 9)) ]] || die "ports $PORT_BASE-$top are taken while this directory's accounting daemons run: \
run \`$0 down --dir $DIR\` first"
        PORT_BASE="$(hashed_port_base)"
        while ports_listening "$PORT_BASE" $((PORT_BASE + 9)); do
            tries=$((tries + 1)); (( tries < 1200 )) || die "no ten free ports in 20000-31999"
            PORT_BASE=$(( 20000 + (PORT_BASE - 20000 + 10) % 12000 ))
        done
        log "ports of $(hashed_port_base) are taken: using $PORT_BASE"
    fi
    echo "$PORT_BASE" >"$DIR/port-base"
}

clients_env() { export SLURM_CONF="$CONF"; }

install_slurm() {
    local missing=()
    for cmd in slurmctld slurmd sbatch squeue scontrol sinfo scancel munged munge unmunge; do
        command -v "$cmd" >/dev/null 2>&1 || [[ -x "/usr/sbin/$cmd" ]] || missing+=("$cmd")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ "$(id -u)" -eq 0 ]] || die "Slurm is not installed (${missing[*]} missing) and installing needs root"
    command -v apt-get >/dev/null || die "Slurm is not installed and apt-get is not available"
    log "installing slurmctld slurmd slurm-client munge with apt"
    local pkgs=(slurmctld slurmd slurm-client munge)
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; then
        apt-get update -qq -o DPkg::Lock::Timeout=120 >/dev/null || die "apt-get update failed"
        apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends "${pkgs[@]}" >/dev/null || die "apt-get install failed"
    fi
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    munge_ok && return 0
    [[ -s /etc/munge/munge.key ]] || die "/etc/munge/munge.key is missing (reinstall the munge package)"
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged 9>&-
    wait_until 10 munge_ok || die "munged did not start (see /var/log/munge/munged.log)"
    touch "$MUNGE_MARK"
}

# Host-wide: munged serves every Slurm on the host, so whichever dev cluster goes down last stops it.
MUNGE_MARK=/run/munge/started-by-slurm-dev

# A slurm daemon of any cluster on this host that has not exited (a zombie has: it is only unreaped).
slurm_daemons_left() {
    ps -e -o stat=,comm= 2>/dev/null | awk '$1 !~ /^Z/ && ($2 == "slurmctld" || $2 == "slurmd" || $2 == "slurmdbd") {n++} END {exit n ? 0 : 1}'
}

install_plugins() {
    local py="${MSCHED_PYTHON:-$REPO/.venv/bin/python}"
    [[ -x "$py" ]] || die "--plugins needs msched: $py is missing (make install, or set MSCHED_PYTHON)"
    "$py" -m msched.cli plugin install --dir "$DIR" >"$DIR/log/plugin-install.log" 2>&1 \
        || die "msched plugin install failed: $(tail -n 1 "$DIR/log/plugin-install.log")"
    # LuaSocket lets cli_filter.lua reach the user's resident decider (msched.plugin.resident); without
    # it every tagged submission starts Python (slower, still correct)
    if ! dpkg -s lua-socket >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends \
            lua-socket >/dev/null 2>&1 || log "lua-socket not installed: the filter starts Python for each decision"
    fi
}

write_config() {
    mkdir -p "$DIR/state" "$DIR/log" "$RUN" "$DIR/dev"
    chmod 0755 "$DIR" "$DIR/state" "$DIR/log" "$RUN" "$DIR/dev"
    local node gpus i port
    {
        echo "# Written by scripts/slurm-dev-cluster.sh: a dev cluster on loopback. Do not edit."
        echo "ClusterName=mscheddev"
        echo "SlurmctldHost=localhost(127.0.0.1)"
        echo "SlurmctldPort=$PORT_BASE"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "StateSaveLocation=$DIR/state"
        echo "SlurmdSpoolDir=$DIR/spool/%n"
        echo "SlurmctldPidFile=$RUN/slurmctld.pid"
        echo "SlurmdPidFile=$RUN/slurmd-%n.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
        echo "SlurmdParameters=config_overrides"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        if [[ $ACCOUNTING -eq 1 ]]; then
            echo "AccountingStorageType=accounting_storage/slurmdbd"
            echo "AccountingStorageHost=localhost"
            echo "AccountingStoragePort=$((PORT_BASE + 8))"
            # Keep the comment (msched's tag) and the GPUs, typed and untyped, in the job history.
            echo "AccountingStoreFlags=job_comment"
            echo "AccountingStorageTRES=gres/gpu,$(for n in "${NODES[@]}"; do printf 'gres/gpu:%s,' "${GPU_TYPE[$n]}"; done | sed 's/,$//')"
        else
            echo "AccountingStorageType=accounting_storage/none"
        fi
        echo "JobCompType=jobcomp/filetxt"
        echo "JobCompLoc=$DIR/jobcomp.txt"
        echo "MpiDefault=none"
        echo "MailProg=/bin/true"
        echo "ReturnToService=2"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "SchedulerType=sched/$SCHEDULER"
        echo "SchedulerParameters=bf_interval=1,bf_resolution=60,sched_min_interval=0"
        # All weights 0: every job gets the same base priority, so `scontrol update priority=`
        # alone decides the start order (SLURM-NOTES).
        echo "PriorityType=priority/multifactor"
        echo "PriorityWeightAge=0"
        echo "PriorityWeightFairshare=0"
        echo "PriorityWeightJobSize=0"
        echo "PriorityWeightPartition=0"
        echo "PriorityWeightQOS=0"
        echo "PriorityWeightAssoc=0"
        if [[ ${#SHARDS_PER_GPU[@]} -gt 0 ]]; then echo "GresTypes=gpu,shard"; else echo "GresTypes=gpu"; fi
        # Finished jobs stay visible to `squeue -t all` for this long (completion tracking).
        echo "MinJobAge=1800"
        # Room for 10,000 pending jobs plus the finished ones MinJobAge keeps (Slurm's default is 10,000).
        echo "MaxJobCount=40000"
        echo "KillWait=2"
        echo "InactiveLimit=0"
        echo "SlurmdTimeout=120"
        echo "MessageTimeout=10"
        if [[ $PLUGINS -eq 1 ]]; then
            echo "CliFilterPlugins=cli_filter/lua"
            echo "JobSubmitPlugins=lua"
        fi
        i=0
        for node in "${NODES[@]}"; do
            i=$((i + 1)); port=$((PORT_BASE + i))
            gres="gpu:${GPU_TYPE[$node]}:${NODE_GPU_COUNT[$node]}" features="${GPU_TYPE[$node]}"
            if [[ -n "${SHARDS_PER_GPU[$node]:-}" ]]; then     # a GPU serves gpu or shard jobs, never both at once
                gres+=",shard:$((SHARDS_PER_GPU[$node] * NODE_GPU_COUNT[$node]))" features+=",shard"
            fi
            echo "NodeName=$node NodeHostname=localhost NodeAddr=127.0.0.1 Port=$port CPUs=$CPUS_PER_NODE RealMemory=16000 Gres=$gres Feature=$features State=UNKNOWN"
        done
        echo "PartitionName=gpu Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES DefaultTime=01:00:00 MaxTime=INFINITE State=UP"
        if [[ "$PARTITION_PER_TYPE" == 1 ]]; then
            for node in "${NODES[@]}"; do
                echo "PartitionName=${GPU_TYPE[$node]} Nodes=$node DefaultTime=01:00:00 MaxTime=INFINITE State=UP"
            done
        fi
        if [[ ${#SHARDS_PER_GPU[@]} -gt 0 ]]; then
            echo "PartitionName=shared Nodes=$(IFS=,; echo "${!SHARDS_PER_GPU[*]}") DefaultTime=01:00:00 MaxTime=INFINITE State=UP"
        fi
    } >"$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
    {
        echo "AutoDetect=off"
        for node in "${NODES[@]}"; do
            mkdir -p "$DIR/spool/$node"
            gpus=()
            for ((i = 0; i < NODE_GPU_COUNT[$node]; i++)); do
                ln -sfn /dev/null "$DIR/dev/$node-gpu$i"
                gpus+=("$DIR/dev/$node-gpu$i")
            done
            echo "NodeName=$node Name=gpu Type=${GPU_TYPE[$node]} File=$(IFS=,; echo "${gpus[*]}")"
            if [[ -n "${SHARDS_PER_GPU[$node]:-}" ]]; then
                echo "NodeName=$node Name=shard Count=$((SHARDS_PER_GPU[$node] * NODE_GPU_COUNT[$node]))"
            fi
        done
    } >"$DIR/gres.conf"
    {
        echo "CgroupPlugin=autodetect"
        echo "ConstrainCores=no"
        echo "ConstrainDevices=no"
        echo "ConstrainRAMSpace=no"
    } >"$DIR/cgroup.conf"
    chmod 0644 "$CONF" "$DIR/gres.conf" "$DIR/cgroup.conf"
}

install_accounting() {
    if [[ -x /usr/sbin/slurmdbd && -x /usr/sbin/mariadbd ]] && command -v sacctmgr >/dev/null; then
        return 0
    fi
    log "installing slurmdbd mariadb-server with apt"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends slurmdbd mariadb-server >/dev/null 2>&1; then
        apt-get update -qq -o DPkg::Lock::Timeout=120 >/dev/null || die "apt-get update failed"
        apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends slurmdbd mariadb-server >/dev/null \
            || die "apt-get install slurmdbd mariadb-server failed"
    fi
}

mysql_cli() { mariadb --no-defaults -S "$RUN/mysql.sock" -u root "$@"; }
mysql_ok() { mysql_cli -e 'select 1' >/dev/null 2>&1; }
dbd_ok() { sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx mscheddev; }

start_accounting() {
    mkdir -p "$DIR/log" "$RUN"
    install_accounting
    local myport=$((PORT_BASE + 9)) dbdport=$((PORT_BASE + 8))
    if [[ ! -d "$DIR/mysql/mysql" ]]; then
        mkdir -p "$DIR/mysql"
        mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root --auth-root-authentication-method=normal \
            --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed (see $DIR/log/mariadb-install.log)"
    fi
    if ! daemon_alive "$RUN/mariadbd.pid" mariadbd; then
        /usr/sbin/mariadbd --no-defaults --datadir="$DIR/mysql" --user=root --socket="$RUN/mysql.sock" \
            --port="$myport" --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$RUN/mariadbd.pid" \
            --log-error="$DIR/log/mariadbd.log" --innodb-buffer-pool-size=32M </dev/null >/dev/null 2>&1 9>&- &
        disown
        wait_until 60 mysql_ok || die "mariadbd did not start (see $DIR/log/mariadbd.log)"
    fi
    mysql_cli -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'msched-dev';
                  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "cannot create the slurm database user"
    {
        echo "AuthType=auth/munge"
        echo "DbdHost=localhost"
        echo "DbdAddr=127.0.0.1"
        echo "DbdPort=$dbdport"
        echo "SlurmUser=root"
        echo "PidFile=$RUN/slurmdbd.pid"
        echo "LogFile=$DIR/log/slurmdbd.log"
        echo "StorageType=accounting_storage/mysql"
        echo "StorageHost=127.0.0.1"
        echo "StoragePort=$myport"
        echo "StorageUser=slurm"
        echo "StoragePass=msched-dev"
        echo "StorageLoc=slurm_acct_db"
    } >"$DIR/slurmdbd.conf"
    chmod 0600 "$DIR/slurmdbd.conf"
    if ! daemon_alive "$RUN/slurmdbd.pid" slurmdbd; then
        /usr/sbin/slurmdbd 9>&- || die "slurmdbd failed to start (see $DIR/log/slurmdbd.log)"
    fi
    wait_until 30 bash -c 'timeout 5 sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1' \
        || die "slurmdbd does not answer (see $DIR/log/slurmdbd.log)"
    if ! dbd_ok; then
        sacctmgr -i add cluster mscheddev >/dev/null || die "sacctmgr add cluster failed"
    fi
}

stop_accounting() {
    stop_daemon "$RUN/slurmdbd.pid" slurmdbd
    stop_daemon "$RUN/mariadbd.pid" mariadbd
}

controller_answers() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
# Another directory's controller on the same port answers too: only ours, alive, counts.
own_controller_answers() { daemon_alive "$RUN/slurmctld.pid" slurmctld && controller_answers; }

# Every node of ours is in one of the states the extended regex $1 names.
all_nodes_in() {
    local states
    states="$(sinfo -h -N -o '%N %T' 2>/dev/null)" || return 1
    local n
    for n in "${NODES[@]}"; do
        grep -qE "^$n $1\$" <<<"$states" || return 1
    done
}

all_nodes_idle() { all_nodes_in idle; }

cluster_running() {
    daemon_alive "$RUN/slurmctld.pid" slurmctld || return 1
    local n
    for n in "${NODES[@]}"; do daemon_alive "$RUN/slurmd-$n.pid" slurmd || return 1; done
    if [[ -f "$DIR/accounting" ]]; then
        daemon_alive "$RUN/slurmdbd.pid" slurmdbd || return 1
    elif [[ $ACCOUNTING -eq 1 ]]; then
        return 1
    fi
    controller_answers
}

stop_daemon() {  # stop_daemon PIDFILE NAME
    local pid; pid="$(pid_of "$1")"
    if [[ -n "$pid" ]] && alive "$pid" "$2"; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_until 10 bash -c "s=\$(ps -o stat= -p $pid | tr -d ' '); [[ -z \$s || \$s == Z* ]]"; then
            log "$2 (pid $pid) ignored SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            wait_until 5 bash -c "s=\$(ps -o stat= -p $pid | tr -d ' '); [[ -z \$s || \$s == Z* ]]" || true
        fi
    fi
    rm -f "$1"
}

do_up() {
    [[ "$(id -u)" -eq 0 ]] || die "starting the Slurm daemons needs root"
    install_slurm
    resolve_dir
    clients_env
    mkdir -p "$RUN"
    local have_plugins=0
    [[ -f "$DIR/plugins" ]] && have_plugins=1
    if [[ $have_plugins -eq $PLUGINS ]] && cluster_running && all_nodes_idle_or_busy; then
        [[ $PLUGINS -eq 1 ]] && install_plugins        # msched's tables may have changed: regenerate
        log "already running in $DIR"
        echo "export SLURM_CONF=$CONF"
        return 0
    fi
    start_munge
    local t0=$SECONDS fresh=0
    if [[ $have_plugins -ne $PLUGINS ]]; then
        # Plugins turned on or off: the controller must restart with the new slurm.conf.
        stop_daemon "$RUN/slurmctld.pid" slurmctld
    fi
    if [[ $ACCOUNTING -eq 1 && ! -f "$DIR/accounting" ]]; then
        # Accounting asked for on a cluster running without it: the controller must restart.
        stop_daemon "$RUN/slurmctld.pid" slurmctld
    fi
    [[ -f "$DIR/accounting" ]] && ACCOUNTING=1
    if ! daemon_alive "$RUN/slurmctld.pid" slurmctld; then
        # A fresh controller: the slurmds of an earlier run would register with stale state.
        for n in "${NODES[@]}"; do stop_daemon "$RUN/slurmd-$n.pid" slurmd; done
        if [[ $PLUGINS -eq 1 ]]; then
            mkdir -p "$DIR/log"
            install_plugins
            touch "$DIR/plugins"
        else
            rm -f "$DIR/plugins" "$DIR/cli_filter.lua" "$DIR/job_submit.lua"
        fi
        choose_port_base
        write_config
        [[ -f "$DIR/jobcomp.txt" ]] && mv -f "$DIR/jobcomp.txt" "$DIR/jobcomp.txt.1"
        : >"$DIR/jobcomp.txt"
        chmod 0644 "$DIR/jobcomp.txt"
        fresh=1
    fi
    if [[ $ACCOUNTING -eq 1 ]]; then
        touch "$DIR/accounting"
        start_accounting
    fi
    if [[ $fresh -eq 1 ]]; then
        /usr/sbin/slurmctld -c -f "$CONF" 9>&- || die "slurmctld failed to start (see $DIR/log/slurmctld.log)"
    fi
    wait_until 20 own_controller_answers || die "slurmctld does not answer (see $DIR/log/slurmctld.log)"
    for n in "${NODES[@]}"; do
        if ! daemon_alive "$RUN/slurmd-$n.pid" slurmd; then
            mkdir -p "$DIR/spool/$n"
            /usr/sbin/slurmd -N "$n" -f "$CONF" 9>&- || die "slurmd -N $n failed to start (see $DIR/log/slurmd-$n.log)"
        fi
    done
    for n in "${NODES[@]}"; do
        wait_until 10 daemon_alive "$RUN/slurmd-$n.pid" slurmd || die "slurmd -N $n did not stay up (see $DIR/log/slurmd-$n.log)"
    done
    if [[ $fresh -eq 1 ]]; then
        wait_until "$UP_TIMEOUT_S" all_nodes_idle || die "nodes not idle after ${UP_TIMEOUT_S}s: $(sinfo -h -N -o '%N=%T' | tr '\n' ' ')"
    else
        wait_until "$UP_TIMEOUT_S" all_nodes_idle_or_busy || die "nodes not up after ${UP_TIMEOUT_S}s: $(sinfo -h -N -o '%N=%T' | tr '\n' ' ')"
    fi
    log "up in $((SECONDS - t0))s ($DIR, controller port $PORT_BASE)"
    echo "export SLURM_CONF=$CONF"
}

# Nodes that run jobs are fine for an already-running cluster; only unusable states count.
all_nodes_idle_or_busy() { all_nodes_in '(idle|mixed|allocated|completing)'; }

do_down() {
    resolve_dir
    clients_env
    if daemon_alive "$RUN/slurmctld.pid" slurmctld; then
        # Cancel the jobs still in the queue so their steps do not outlive the daemons.
        local ids
        ids="$(timeout 10 squeue -h -o '%i' 2>/dev/null | tr '\n' ' ')" || true
        if [[ -n "${ids// /}" ]]; then
            # shellcheck disable=SC2086
            timeout 10 scancel $ids 2>/dev/null || true
        fi
    fi
    for n in "${NODES[@]}"; do stop_daemon "$RUN/slurmd-$n.pid" slurmd; done
    stop_daemon "$RUN/slurmctld.pid" slurmctld
    stop_accounting
    rm -f "$RUN/munged.started-by-us"               # the per-directory marker of older versions
    if [[ -f "$MUNGE_MARK" ]] && ! slurm_daemons_left; then
        # munged is shared by every Slurm on the host: stop it only when no slurm daemon is left (the
        # daemons stopped above have exited; stop_daemon waited, and a zombie does not count). While
        # another cluster runs, the marker stays, so the last `down` stops it.
        stop_daemon /run/munge/munged.pid munged
        rm -f "$MUNGE_MARK"
    fi
    log "down ($DIR)"
}

do_status() {
    resolve_dir
    clients_env
    local rc=0 n
    if daemon_alive "$RUN/slurmctld.pid" slurmctld; then
        echo "slurmctld running (pid $(pid_of "$RUN/slurmctld.pid"), port $PORT_BASE)"
    else
        echo "slurmctld stopped"; rc=1
    fi
    for n in "${NODES[@]}"; do
        if daemon_alive "$RUN/slurmd-$n.pid" slurmd; then
            echo "slurmd $n running (pid $(pid_of "$RUN/slurmd-$n.pid"))"
        else
            echo "slurmd $n stopped"; rc=1
        fi
    done
    if [[ $rc -eq 0 ]]; then
        sinfo -N -o '%N %T %G %f' 2>/dev/null || rc=1
        echo "export SLURM_CONF=$CONF"
    fi
    return $rc
}

# Serialise concurrent up/down/status on the same directory (several test sessions share it).
resolve_dir
if [[ "$ACTION" != status ]]; then
    exec 9>"$DIR/.lock"
    flock -w 120 9 || die "another slurm-dev-cluster.sh holds $DIR/.lock"
fi
case "$ACTION" in
    up) do_up ;;
    down) do_down ;;
    status) do_status ;;
esac
