#!/usr/bin/env bash
# `sbx shell`, `sbx exec -it` and `sbx attach` used as a person would: in a
# tmux pane (a real terminal), keys sent with send-keys, the screen read with
# capture-pane. Every wait is for something to appear on the screen (or a
# pane to end); nothing is asserted about how long anything takes.
# tmux runs sbx itself: not under memcheck.
SBX_NO_VALGRIND_CLI=1
. "$(dirname "$0")/lib.sh"
need_root
command -v tmux >/dev/null || skip_all "tmux is not installed (scripts/deps.sh)"
TMUX_SOCK="$T/tmux.sock"
tm() { tmux -S "$TMUX_SOCK" "$@"; }
screen() { tm capture-pane -p -J -S -200 -t "$1" 2>/dev/null; }
# waits until pane $1's screen shows $2 (an extended regex); 1 when the pane ended first.
wait_screen() {
  while :; do
    if screen "$1" | grep -Eq -- "$2"; then return 0; fi
    tm has-session -t "$1" 2>/dev/null || return 1
    [ -n "$(tm list-panes -t "$1" -F '#{pane_dead}' 2>/dev/null | grep 1)" ] && { screen "$1" | grep -Eq -- "$2"; return $?; }
    sleep 0.1
  done
}
# pane NAME COLS ROWS CMD: runs CMD in a new tmux session of that size; its exit
# status lands in $T/st.NAME (tmux itself does not always report it).
pane() { rm -f "$T/st.$1"; tm new-session -d -s "$1" -x "$2" -y "$3" "$4; echo \$? > $T/st.$1.tmp; mv $T/st.$1.tmp $T/st.$1"; }
# waits until pane $1's command ended; prints its exit status.
wait_dead() { while [ ! -s "$T/st.$1" ]; do sleep 0.1; done; cat "$T/st.$1"; }

ID=$("$SBX" create -e GREETING=from-create 2>"$T/err") || { not_ok "create" "$(cat "$T/err")"; finish; exit 1; }
ok "create $ID"

# Not a terminal: refused as docker refuses it.
run "exec -t without a TTY is refused" 2 "$SBX" exec -t "$ID" -- true
check "the refusal says why" has "$ERR" "the input device is not a TTY"

# The box's shell in a 100x30 pane: prompt, a command, its output.
# A tmux server of our own (no user config); panes stay after their command ends.
tm -f /dev/null new-session -d -s base
tm set-option -g remain-on-exit on
pane sh 100 30 "$SBX shell $ID"
check "the shell shows a prompt" wait_screen sh '[#$] *$'
tm send-keys -t sh 'echo hello-$((6*7)) $GREETING' Enter
check "a command's output shows, with the box's env" wait_screen sh 'hello-42 from-create'
tm send-keys -t sh 'stty size' Enter
check "the terminal has the pane's size" wait_screen sh '^30 100'
tm resize-window -t sh -x 120 -y 40
tm send-keys -t sh 'stty size' Enter
check "a resize follows" wait_screen sh '^40 120'
tm send-keys -t sh 'sleep 1000; echo not-interrupted' Enter
while ! "$SBX" exec "$ID" -- pgrep -x sleep >/dev/null 2>&1; do sleep 0.1; done
tm send-keys -t sh C-c
tm send-keys -t sh 'echo after-ctrl-c-$?' Enter
check "Ctrl-C interrupts the foreground job" wait_screen sh 'after-ctrl-c-130'
check "and the line after it never ran" sh -c "! tmux -S '$TMUX_SOCK' capture-pane -p -t sh | grep -q '^not-interrupted'"
tm send-keys -t sh 'exit 3' Enter
st=$(wait_dead sh)
if [ "$st" = 3 ]; then ok "exit 3 gives status 3"; else not_ok "exit 3 gives status 3" "got $st" "$(screen sh)"; fi
tm kill-session -t sh

# exec -it: a command on a terminal, its status passed through.
pane ex 80 24 "$SBX exec -it $ID -- sh -c 'test -t 0 && echo on-a-tty; exit 4'"
st=$(wait_dead ex)
if [ "$st" = 4 ]; then ok "exec -it passes the status"; else not_ok "exec -it passes the status" "got $st" "$(screen ex)"; fi
check "exec -it runs on a terminal" wait_screen ex 'on-a-tty'
tm kill-session -t ex

# A full-screen program draws and quits: less pages a numbered file, 'q' ends it.
if "$SBX" exec "$ID" -- sh -c 'command -v less' >/dev/null 2>&1; then
  "$SBX" exec "$ID" -- sh -c 'seq 1 500 | sed "s/^/line-/" > /tmp/lines' >/dev/null
  pane ls 80 24 "$SBX exec -it $ID -- less /tmp/lines"
  check "less draws its first screen" wait_screen ls '^line-23$'
  check "and only one screen of it" sh -c "! tmux -S '$TMUX_SOCK' capture-pane -p -t ls | grep -q '^line-30$'"
  tm send-keys -t ls G
  check "less jumps to the end" wait_screen ls '^line-500$'
  tm send-keys -t ls q
  st=$(wait_dead ls)
  if [ "$st" = 0 ]; then ok "less quits with q"; else not_ok "less quits with q" "got $st" "$(screen ls)"; fi
  tm kill-session -t ls
else
  not_ok "less is in the box" "the box (host /usr) has no less: install it (scripts/deps.sh)"
fi

# Detach with Ctrl-P Ctrl-Q, then attach back: the output printed meanwhile is replayed.
pane dt 80 24 "$SBX shell $ID"
check "second shell prompt" wait_screen dt '[#$] *$'
tm send-keys -t dt 'echo before-detach; (sleep 0.5; echo while-detached-$((3*3))) &' Enter
check "before detach" wait_screen dt '^before-detach'
tm send-keys -t dt C-p C-q
check "Ctrl-P Ctrl-Q detaches and says how to come back" wait_screen dt 'sbx attach'
st=$(wait_dead dt)
if [ "$st" = 0 ]; then ok "detach exits 0"; else not_ok "detach exits 0" "got $st"; fi
SESSION=$(screen dt | sed -n 's/.*come back with: sbx attach [^ ]* \([0-9]*\).*/\1/p' | tail -1)
tm kill-session -t dt
while ! "$SBX" exec "$ID" -- sh -c '! pgrep -x sleep' >/dev/null 2>&1; do sleep 0.1; done
pane at 80 24 "$SBX attach $ID $SESSION"
check "attach replays what came while detached" wait_screen at 'while-detached-9'
tm send-keys -t at 'echo back-$((5+5))' Enter
check "the attached shell takes commands" wait_screen at 'back-10'
tm send-keys -t at 'exit 6' Enter
st=$(wait_dead at)
if [ "$st" = 6 ]; then ok "the attached session's status"; else not_ok "the attached session's status" "got $st" "$(screen at)"; fi

# run -it: a new box, CMD on a terminal of the pane's size, its status, the box gone after.
run "run -t without a TTY is refused" 2 "$SBX" run -t -- true
check "the refusal says why (run)" has "$ERR" "the input device is not a TTY"
pane rn 90 20 "$SBX run -it -- sh -c 'stty size; exit 5'"
st=$(wait_dead rn)
if [ "$st" = 5 ]; then ok "run -it passes the status"; else not_ok "run -it passes the status" "got $st" "$(screen rn)"; fi
check "run -it has the pane's size" wait_screen rn '^20 90'
tm kill-session -t rn
tm kill-server 2>/dev/null

run "stop" 0 "$SBX" stop "$ID"
finish
