#!/usr/bin/env bash
# CI's container stage: build the grader image, grade the reference solution and hostile submissions inside
# containers through the real docker backend (`grader grade --backend docker`) and check what they scored.
# Exits non-zero when Docker cannot run at all.  The docker backend tests run in the suite, which .ci/run
# starts with the same engine still up and GRADER_REQUIRE_DOCKER=1 (skipping them fails there).
#
# Needs: root or a working Docker engine; the grader's Python dependencies importable by $PYTHON.
set -euo pipefail

# --- what must be graded, and what it must score --------------------------------------------------------
# Hostile corpus entries: tests/corpus/hostile/<name>/ is the submission, or what its make.py builds (a .git of
# its own, a tree 1,100 levels deep, names that are not UTF-8).  Its expected.json decides: item scores, `args`
# for grader grade, `result` values, `problems` and files that must stay `absent` (as in
# tests/test_hostile_corpus.py); an entry without one must score the total given after its name.
HOSTILE=(
    "read_reference=-"       # searches the disk for a reference collectives.py: the image holds none
    "kill_parents=-"         # signals its ancestors: the grader must survive and still grade it
    "forged_results=-"       # writes a 100/100 results.json wherever it can, /results included
    "git_config_programs=-"  # its .git/config names programs (gpg.program, fsmonitor, filters...): none may run
    "backdated_commit=-"     # committed before the deadline, pushed three weeks after: the push time counts
    "deep_tree=-"            # a folder 1,100 levels deep: the search stops at 64 and says so
    "odd_bytes_names=-"      # folders named b'old\xff' and with a newline: refused, and named printably
    # issue 11's classes of attack, each held inside the container too:
    "oracle_expected_values=-" # looks for expected values in frames, gc and the grader package
    "guard_patched=-"          # patches the guard from inside, then calls dist.all_reduce
    "unguarded_routes=-"       # private bindings, a stub's closure, dispatcher ops by name
    "forged_trace_types=-"     # a trace of the wrong types and a deeply nested field
    "exit_70_and_deep_frame=-" # exit status 70, a reply header nested 200,000 deep
    "kill_every_process=-"     # kill(-1, SIGKILL)
    "memfd_3gib=-"             # 3 GiB in memfd files RLIMIT_AS never sees
    "escape_time_bound=-"      # a setsid double fork at import and a case that never ends
    # issue 20's state and static classes:
    "tp_private_weights=-"                 # full weights kept in an attribute, closure, global, class, another module, a file
    "tp_full_weights_as_shards=-"          # every *_shard is the whole weight: the serial forward
    "ulysses_dummy_exchange_then_serial=-" # one dummy my_all_to_all, the sequence gathered with my_allgather
    "dist_through_another_module=-"        # dist.all_reduce as torch.utils.data.distributed.dist.all_reduce
    # issue 20, class 4: an A4 data-parallel step that rebuilds the clean batch from the handout's recipe
    "a4_regenerates_clean_batch=-"
    # issue 20's runtime classes:
    "side_channels=-"            # UDP, empty datagrams, IP options/TOS, other loopback addresses, urgent data
    "flood_hidden_all_to_all=-"  # floods the loopback, then a forbidden all_to_all through another module's attribute
    "thread_outlives_case=-"     # a spinning thread left behind by every my_allgather
    "thread_at_import=-"         # a spinning thread started by collectives.py's import (issue 39)
    "spin_every_collective=-"    # every collective spins forever at world size 2 or more: a hang per function
    "a5_steal_q8_answer=-"     # A5: a Q8 snippet that looks for the grader's Q8 answer (modules, frames, gc, disk)
)
# Graded first, the two longest (about 2 minutes each on 2 cores): started last, either ran on alone at the
# end while the other slot sat idle, and the stage took a minute longer.
LONGEST=(flood_hidden_all_to_all unguarded_routes)
REFERENCE=reference/a9  # its tasks must earn max_score, and some bonus on top
COMMIT_TIME=2026-01-05T12:00:00+00:00  # the reference's commit, as results.json must report it with --trust-commit-time
# ---------------------------------------------------------------------------------------------------------

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${IMAGE:-grader:local}
PYTHON=${PYTHON:-python3}
OUT=${CI_CONTAINER_OUT:-$ROOT/artifacts/container-stage}

say() { printf '[ci-container-stage] %s\n' "$*" >&2; }
die() { printf '[ci-container-stage] FAILED: %s\n' "$*" >&2; exit 1; }

ensure_docker() {  # an engine that already answers (.ci/run starts one for the whole run) is left as it is
    docker info >/dev/null 2>&1 && return 0
    bash "$ROOT/scripts/docker-engine.sh" start
    trap 'bash "$ROOT/scripts/docker-engine.sh" stop' EXIT  # only the engine started here
}

problems=()
graded=()  # NAME=WANT=SUBMISSION of every grading started
gradings=()  # their pids: waited for one by one, never with a bare `wait`
# Containers graded at once.  Two kept the cores 81% busy (a grading waits on its hung cases' budgets and on
# Docker); three kept them 90% busy and the stage took 358 s instead of 394 (the image build aside).
PARALLEL=${CI_CONTAINER_JOBS:-3}
running() { local n=0 pid; for pid in "${gradings[@]}"; do kill -0 "$pid" 2>/dev/null && n=$((n + 1)); done; echo "$n"; }
grade() {  # grade NAME SUBMISSION WANT [ARGS...]: in the background; results land in $OUT/NAME, its log beside
    local name=$1 submission=$2 want=$3
    shift 3
    while [[ $(running) -ge $PARALLEL ]]; do wait -n "${gradings[@]}" 2>/dev/null || true; done  # a reaped pid is "no such job"
    say "grading $submission in a container"
    rm -rf "${OUT:?}/$name" "$OUT/$name.failed"
    graded+=("$name=$want=$submission")
    (cd "$ROOT" && "$PYTHON" -m grader grade "$submission" --backend docker --image "$IMAGE" --out "$OUT/$name" "$@" \
        >"$OUT/$name.log" 2>&1 || echo "$?" >"$OUT/$name.failed") &
    gradings+=("$!")
}

cd "$ROOT"
"$PYTHON" -c "import docker, jsonschema, yaml" 2>/dev/null \
    || die "$PYTHON lacks the grader's dependencies (pip install -e . after CPU torch; see docs/platforms.md)"
ensure_docker
say "$(docker version --format 'Docker engine {{.Server.Version}}')"

start=$SECONDS
bash "$ROOT/scripts/build-image.sh"
say "image ready in $((SECONDS - start)) s"

mkdir -p "$OUT"
# The reference is graded as a student's repository would be: a git checkout whose commit the grader
# reads from inside the container (the commit time decides lateness).
repo=$(mktemp -d /tmp/ci-container-stage-reference.XXXXXX)
cp -r "$REFERENCE"/. "$repo"/
git -C "$repo" init -q
git -C "$repo" add -A
GIT_AUTHOR_DATE=$COMMIT_TIME GIT_COMMITTER_DATE=$COMMIT_TIME \
    git -C "$repo" -c user.name=ci -c user.email=ci@localhost commit -qm reference
grade reference "$repo" max --trust-commit-time
grade naive reference/a9-naive 100  # the star algorithms: full marks and no bonus, under this backend too
# The image holds every pack: A4's reference, handed in as the handout asks (one zip), graded by --pack.
a4zip=$(mktemp -d /tmp/ci-container-stage-a4.XXXXXX)/handin.zip
"$PYTHON" -c 'import shutil, sys; shutil.make_archive(sys.argv[1][:-4], "zip", sys.argv[2])' "$a4zip" reference/a4
grade a4 "$a4zip" 100 --pack a4
# A5's hand-in is one report.md: 88 automatic points, Q1's 10 and Q7's explanation's 2 wait for an instructor.
grade a5 reference/a5 88 --pack a5
# HW12's hand-in is a notebook, graded on the threads runtime: the handout's 6.5 points.
grade hw12 reference/hw12 6.5 --pack hw12
built=()  # submissions made by a make.py: removed at the end, after the checks looked beside them
ordered=()
for entry in "${HOSTILE[@]}"; do [[ " ${LONGEST[*]} " == *" ${entry%%=*} "* ]] && ordered=("$entry" "${ordered[@]}"); done
for entry in "${HOSTILE[@]}"; do [[ " ${LONGEST[*]} " == *" ${entry%%=*} "* ]] || ordered+=("$entry"); done
for entry in "${ordered[@]}"; do
    name=${entry%%=*}
    dir=tests/corpus/hostile/$name
    if [[ ! -d $dir ]]; then
        problems+=("$dir is missing")
        continue
    fi
    submission=$dir
    if [[ -f $dir/make.py ]]; then
        submission=$(mktemp -d "/tmp/ci-container-stage-$name.XXXXXX")/submission
        built+=("$(dirname "$submission")")
        "$PYTHON" "$dir/make.py" "$submission" || { problems+=("$dir/make.py failed (above)"); continue; }
    fi
    args=()
    if [[ -f $dir/expected.json ]]; then
        mapfile -t args < <("$PYTHON" -c 'import json, sys; sys.stdout.writelines(a + "\n" for a in json.load(open(sys.argv[1])).get("args", []))' "$dir/expected.json")
    fi
    grade "$name" "$submission" "${entry#*=}" "${args[@]}"
done
# GitHub Classroom's own path, for every pack: its template's workflow step verbatim, under Docker's default
# seccomp profile (no pivot_root there: the A9 reference once scored 20/100 that way while every grading
# above passed), grading the reference and the untouched template as a student's checkout, then the step's
# output read as the reporter reads it, whose points must be the grader's.  In the same slots as the
# gradings above: one at a time, a slot sat idle for about a minute and a half.  HW12's template
# first: it once waited a second after each of its failed cases, and last it ran on alone.
# The last door is the workflow's service mode (issue 59): the same step verbatim with GRADER_SERVICE set, its
# `grader submit` in the image against a local `grader serve` and OIDC issuer (bench-classroom.py --service).
doors=()  # PACK:TREE:SCORE[:service] of every door grading started, its log and failure marker under $OUT/door-<n>
for door in hw12:student_template/hw12:0+0 a9:reference/a9:105+5 a4:reference/a4:100+0 hw12:reference/hw12:6.5+0 \
    a5:reference/a5:88+0 a9:student_template/a9:0+0 a4:student_template/a4:0+0 a5:student_template/a5:0+0 \
    a9:reference/a9:105+5:service; do
    IFS=: read -r pack tree score mode <<<"$door"
    while [[ $(running) -ge $PARALLEL ]]; do wait -n "${gradings[@]}" 2>/dev/null || true; done
    say "grading $tree as the $pack template's Classroom workflow step runs it"
    log=$OUT/door-${#doors[@]}
    doors+=("$door")
    rm -f "$log.log" "$log.failed"
    ("$PYTHON" "$ROOT/scripts/bench-classroom.py" --image "$IMAGE" --pack "$pack" --submission "$tree" --expect "$score" \
        ${mode:+--service} >"$log.log" 2>&1 || echo "$?" >"$log.failed") &
    gradings+=("$!")
done
for pid in "${gradings[@]}"; do wait "$pid" 2>/dev/null || true; done
rm -rf "$repo" "$(dirname "$a4zip")"
for n in "${!doors[@]}"; do
    IFS=: read -r pack tree score mode <<<"${doors[$n]}"
    cat "$OUT/door-$n.log" >&2
    if [[ -f $OUT/door-$n.failed ]]; then
        problems+=("the $pack Classroom workflow's step ${mode:+(service mode) }does not grade $tree $score, or the reporter's points differ")
    fi
done
checks=()
for job in "${graded[@]}"; do
    name=${job%%=*}
    if [[ -f $OUT/$name.failed ]]; then
        tail -n 20 "$OUT/$name.log" >&2
        problems+=("grading $name failed (exit $(cat "$OUT/$name.failed"); log: $OUT/$name.log)")
    else
        checks+=("$job")
    fi
done

say "checking scores"
COMMIT_TIME=$COMMIT_TIME "$PYTHON" - "$OUT" "${checks[@]}" <<'PY' || problems+=("scores or isolation not as expected (above)")
import json
import os
import sys
from pathlib import Path

out, checks = Path(sys.argv[1]), sys.argv[2:]
failures = []
for check in checks:
    name, want, submission = check.split("=", 2)
    result = json.loads((out / name / "results.json").read_text())
    items = {i["id"]: i["score"] for t in result["tasks"] for i in t["items"]}
    seen = f"{name}: score {result['score']}/{result['max_score']} (+{result['bonus_score']} bonus)"
    print(seen)
    if result["status"] != "graded":
        failures.append(f"{name}: status {result['status']}: {result['error']}")
    # The grade of record builds every layer of the rank sandbox inside the container, as on a host.
    layers = result["isolation"]
    off = {k: v for k, v in layers.items() if v.partition(":")[0] != "on"}
    wanted = {"zygote", "salt", "pid_namespace", "cgroup", "measured_traffic", "uid", "filesystem", "ipc", "network",
              "seccomp", "audit_hooks", "prctl", "rlimits", "nproc", "fds"}
    if off or not wanted <= set(layers):
        failures.append(f"{name}: layers off or missing in the container: {off}, missing {sorted(wanted - set(layers))}")
    expected_file = Path("tests/corpus/hostile") / name / "expected.json"
    if want == "max":
        sub = result["submission"]
        read = (sub["submitted_at"], sub["submitted_at_source"]) == (os.environ["COMMIT_TIME"], "commit")
        if not sub["commit"] or not read:
            failures.append(f"{name}: commit {sub['commit']} at {sub['submitted_at']} ({sub['submitted_at_source']}) not read")
        failures += [f"{name}: {problem}" for problem in sub["problems"]]
        earned = sum(t["score"] for t in result["tasks"] if not t["bonus"])
        if earned != result["max_score"] or result["bonus_score"] <= 0:
            failures.append(f"{seen}: tasks earned {earned}; expected full marks plus bonus")
    elif expected_file.exists():
        expected = json.loads(expected_file.read_text())
        for item, score in expected.get("items", expected).items():
            if abs(items.get(item, float("nan")) - float(score)) > 1e-9:
                failures.append(f"{name}: {item} scored {items.get(item)}, expected {score}")
        for dotted, value in expected.get("result", {}).items():
            seen_value = result
            for key in dotted.split("."):
                seen_value = seen_value[key]
            if seen_value != value:
                failures.append(f"{name}: {dotted} is {seen_value!r}, expected {value!r}")
        failures += [f"{name}: no problem says {p!r}" for p in expected.get("problems", []) if p not in result["submission"]["problems"]]
        for marker in expected.get("absent", []):  # what the attack leaves where it can write, had it run
            failures += [f"{name}: {place / marker} exists: the attack ran" for place in (out / name, Path(submission)) if (place / marker).exists()]
    elif abs(result["score"] - float(want)) > 1e-9:
        failures.append(f"{seen}; expected {want}")
for failure in failures:
    print("FAILED:", failure, file=sys.stderr)
sys.exit(1 if failures else 0)
PY
for dir in "${built[@]}"; do rm -rf "$dir"; done  # rm copes with a tree too deep for other tools
if [[ ${#problems[@]} != 0 ]]; then
    printf '[ci-container-stage] FAILED: %s\n' "${problems[@]}" >&2
    exit 1
fi
say "container stage passed"
