#!/usr/bin/env python3
"""ptyterm.py - run a command on a pseudo-terminal of a given size, and replay what it wrote
through a small terminal model (standard library only).

  ptyterm.py run --cols N [--rows N] [--interrupt-at TEXT] OUT -- CMD...
      runs CMD with its stdin/stdout/stderr on a pty of N columns, writes everything it printed
      to OUT (raw bytes); with --interrupt-at, sends SIGINT once TEXT has appeared and 0.3 s
      passed. Exits with CMD's exit status.
  ptyterm.py screen --cols N OUT
      prints every row the output left on the terminal (scrollback included), then a last line
      "wraps=K unknown=U": K characters the terminal had to wrap onto the next row because they
      came at or past its last column, U escape sequences the model does not know.

The model: printable characters advance the cursor (a UTF-8 character takes one cell), a
character at or past the last column wraps to the next row (counted), CR returns, LF (after the
pty's CR-LF translation) goes down, ESC[nA goes up, ESC[K clears to the end of the row, ESC[J
to the end of the screen. That is all the progress display may use.
"""
import os
import pty
import re
import select
import signal
import struct
import sys
import time


def run(cols, rows, out, interrupt_at, cmd):
    pid, fd = pty.fork()
    if pid == 0:
        import fcntl
        import termios
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.environ.pop("COLUMNS", None)
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    data = b""
    seen_at = None
    sent = False
    while True:
        if interrupt_at and not sent and seen_at is None and interrupt_at.encode() in data:
            seen_at = time.time()
        if seen_at is not None and not sent and time.time() - seen_at > 0.3:
            os.kill(pid, signal.SIGINT)
            sent = True
        r, _, _ = select.select([fd], [], [], 0.05)
        if not r:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    _, status = os.waitpid(pid, 0)
    with open(out, "wb") as f:
        f.write(data)
    if interrupt_at and not sent:
        print(f"ptyterm: '{interrupt_at}' never appeared; no interrupt sent", file=sys.stderr)
    return os.waitstatus_to_exitcode(status)


def screen(cols, path):
    text = open(path, "rb").read().decode("utf-8", "replace")
    grid = [[]]
    row = col = wraps = unknown = 0
    i = 0

    def cell_row(r):
        while len(grid) <= r:
            grid.append([])
        return grid[r]

    while i < len(text):
        c = text[i]
        if c == "\r":
            col = 0
        elif c == "\n":
            row += 1
            col = 0
            cell_row(row)
        elif c == "\x1b":
            m = re.match(r"\x1b\[(\d*)([A-Za-z])", text[i:])
            if not m:
                unknown += 1
                i += 1
                continue
            n = int(m.group(1) or 1)
            if m.group(2) == "A":
                row = max(0, row - n)
            elif m.group(2) == "K":
                del cell_row(row)[col:]
            elif m.group(2) == "J":
                del cell_row(row)[col:]
                del grid[row + 1:]
            else:
                unknown += 1
            i += m.end()
            continue
        elif ord(c) >= 0x20:
            if col >= cols:
                wraps += 1
                row += 1
                col = 0
            line = cell_row(row)
            while len(line) < col:
                line.append(" ")
            if col < len(line):
                line[col] = c
            else:
                line.append(c)
            col += 1
        i += 1
    for line in grid:
        print("".join(line).rstrip())
    print(f"wraps={wraps} unknown={unknown}")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "run":
        args = argv[2:]
        cols, rows, interrupt_at = 80, 24, None
        while args and args[0] != "--":
            if args[0] == "--cols":
                cols = int(args[1]); args = args[2:]
            elif args[0] == "--rows":
                rows = int(args[1]); args = args[2:]
            elif args[0] == "--interrupt-at":
                interrupt_at = args[1]; args = args[2:]
            else:
                out = args[0]; args = args[1:]
        return run(cols, rows, out, interrupt_at, args[1:])
    if len(argv) == 5 and argv[1] == "screen" and argv[2] == "--cols":
        return screen(int(argv[3]), argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
