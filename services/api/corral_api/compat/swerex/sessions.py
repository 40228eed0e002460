"""Persistent shell sessions inside the sandbox, driven through plain execs.

SWE-ReX keeps one long-lived bash per session (pexpect on a pty) and reads each command's
output up to its prompt, then the exit code through an echo marker. Here the long-lived
shell runs *inside the sandbox*: ``create`` starts an interactive shell (bash, else sh)
detached into its own session, reading its commands from a FIFO it holds open read-write
(so it never sees end-of-file) and appending its output to a file. Each later call is one
short exec of DRIVER that hands the shell a line ``. cmd-file; echo $? > done-fifo`` and
blocks on that FIFO (no polling) until the marker comes or the timeout passes.

Why not a process held by the node-agent: the shell, its files and its output then live
and are counted in the sandbox like anything else it runs, a node-agent restart cannot cut
them, and it works unchanged on every backend that can exec (crun containers, microVMs).

The shell is interactive (``-i``) for SWE-ReX's semantics: state (cwd, variables,
functions) persists between commands, and a SIGINT to its process group ends the running
command but not the shell (it aborts the rest of that line, as Ctrl-C at a prompt does).
"""

import re

from corral_common.contracts.exec import ExecRequest, ExecResult

# Exit codes DRIVER uses for its own outcomes (a command's own exit code travels on stderr).
NO_SESSION, SESSION_EXISTS, BAD_SYNTAX, TIMED_OUT, DRIVER_FAILED = 91, 92, 93, 94, 90
SESSION_DIR = "/tmp/.corral-swerex"  # noqa: S108 - a path inside the sandbox, root-owned (drivers run as root)
SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_ANSI = re.compile(r"\x1B[@-_][0-?]*[ -/]*[@-~]")

# argv: shell, op, session dir, token, timeout s, output limit, expect strings...; stdin: the text.
# Portable across bash and busybox ash (both have fractional `read -t`); dash lacks it, so
# LAUNCHER prefers bash.
DRIVER = r"""
S=$1 op=$2 d=$3 tok=$4 t=$5 lim=$6; shift 6
alive() { [ -s "$d/pid" ] && kill -0 "$(cat "$d/pid")" 2>/dev/null; }
# Give the shell one line that runs cmd.$tok, then wait for its exit code on done.$tok.
sync_line() {
  rm -f "$d"/done.*
  mkfifo "$d/done.$tok" || exit 90
  exec 4<>"$d/done.$tok"
  [ "$1" = keep ] || : > "$d/out"
  printf '. %s/cmd.%s; __corral_rc=$?; (echo "$__corral_rc" > %s/done.%s) 2>/dev/null\n' \
    "$d" "$tok" "$d" "$tok" > "$d/in"
  if read -r -t "$t" rc <&4; then
    rm -f "$d/done.$tok" "$d/cmd.$tok"; head -c "$lim" "$d/out"; echo "$rc" >&2; exit 0
  fi
  # Timed out: the command runs on. Without the FIFO its late marker lands in a plain file.
  rm -f "$d/done.$tok"; head -c "$lim" "$d/out"; exit 94
}
case $op in
create)
  alive && exit 92
  rm -rf "$d"; mkdir -p "$d" && mkfifo "$d/in" || exit 90
  case $S in *bash) flags='--norc --noprofile --noediting -i' ;; *) flags=-i ;; esac
  # Job control, so the detached shell does not start with SIGINT ignored as a background
  # job otherwise would (and pass that on to every command). ash cannot without a tty: its
  # interrupts fall back to "kill".
  set -m 2>/dev/null
  HISTFILE= ENV= setsid "$S" -c \
    'exec 3<>"$1/in"; echo $$ > "$1/pid"; PS1= PS2= PS0= exec "$0" $2 <&3 3<&- >>"$1/out" 2>&1' "$S" "$d" "$flags" \
    </dev/null >/dev/null 2>&1 &
  set +m 2>/dev/null
  i=0; while [ ! -s "$d/pid" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
  cat > "$d/cmd.$tok"; sync_line ;;
run)
  alive || exit 91
  cat > "$d/cmd.$tok"
  if ! "$S" -n "$d/cmd.$tok" 2>"$d/err.$tok"; then cat "$d/err.$tok" >&2; rm -f "$d/cmd.$tok" "$d/err.$tok"; exit 93; fi
  rm -f "$d/err.$tok"; sync_line ;;
input)
  # Text for the program running in the shell (an interactive tool): no marker, wait for
  # one of the expect strings instead (polled: it is output, not a FIFO).
  alive || exit 91
  : > "$d/out"; cat > "$d/in"
  n=$(awk "BEGIN{print int($t * 20)}" 2>/dev/null || echo 600); i=0
  while [ $i -lt "$n" ]; do
    for e in "$@"; do
      if grep -qF -- "$e" "$d/out"; then head -c "$lim" "$d/out"; printf '%s' "$e" >&2; exit 0; fi
    done
    sleep 0.05; i=$((i + 1))
  done
  head -c "$lim" "$d/out"; exit 94 ;;
interrupt|kill)
  alive || exit 91
  pid=$(cat "$d/pid")
  if [ "$op" = interrupt ]; then kill -s INT -- "-$pid" 2>/dev/null
  else  # the fallback: SIGKILL everything in the shell's process group but the shell
    for f in /proc/[0-9]*/stat; do
      read -r l < "$f" 2>/dev/null || continue
      p=${f#/proc/}; p=${p%/stat}; r=${l##*) }; set -- $r
      [ "$3" = "$pid" ] && [ "$p" != "$pid" ] && kill -s KILL "$p" 2>/dev/null
    done
  fi
  echo : > "$d/cmd.$tok"; sync_line keep ;;
close)
  alive || exit 91
  kill -s KILL -- "-$(cat "$d/pid")" 2>/dev/null; rm -rf "$d"; exit 0 ;;
esac
exit 90
"""

# /bin/sh exists everywhere; it re-executes DRIVER under bash when the image has it.
LAUNCHER = 'd=$1; shift; S=$(command -v bash || echo /bin/sh); exec "$S" -c "$d" swerex "$S" "$@"'


def session_dir(session: str) -> str:
    return f"{SESSION_DIR}/{session}"


def driver_exec(op: str, session: str, token: str, *, timeout_s: float, output_limit: int, stdin: str = "",
                expect: list[str] | None = None) -> ExecRequest:
    """The exec that performs ``op`` on ``session``; it ends a few seconds after ``timeout_s``
    at the latest (the shell-side wait has that bound itself)."""
    argv = ["/bin/sh", "-c", LAUNCHER, "swerex", DRIVER, op, session_dir(session), token, f"{timeout_s:g}",
            str(output_limit), *(expect or [])]
    return ExecRequest(cmd=argv, stdin=stdin, timeout_s=timeout_s + 10, output_limit=output_limit + 4096,
                       user="root")


def strip_control_chars(text: str) -> str:
    """As SWE-ReX does to what its pty returns: ANSI escapes out, CRLF to LF."""
    return _ANSI.sub("", text).replace("\r\n", "\n")


def exit_code_of(result: ExecResult) -> int | None:
    """The command's exit code, which DRIVER prints on stderr after a marker came."""
    last = result.stderr.strip().rsplit("\n", 1)[-1] if result.stderr.strip() else ""
    return int(last) if last.lstrip("-").isdigit() else None
