#!/usr/bin/env python3
"""term_screenshot.py - draw what a terminal showed as a PNG.

    term_screenshot.py RAW OUT.png [--cols 80] [--rows 24] [--cut-after REGEX] [--nth N] [--title TEXT]
                       [--trim]

RAW is everything a program wrote to its terminal (tests/cli/ptyterm.py run ... RAW -- CMD records
it on a pseudo-terminal of a chosen size). The bytes are replayed through pyte, a VT100 emulator,
on a screen of --cols x --rows, up to the end of the N-th match (default the first) of --cut-after
(a regular expression over the raw bytes, to catch a moment of a live display) or to the end, and
that screen is drawn in DejaVu Sans Mono, light text on a dark background, with a thin border;
--trim leaves out the empty rows under the last written one (the screen is still --cols wide).

Needs pyte and Pillow (pip install pyte pillow) and the DejaVu fonts (Debian: fonts-dejavu-core).
tools/make_progress_screenshot.sh makes docs/progress-80col*.png with it.
"""
import argparse
import re
import sys

import pyte
from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
BG, FG, BORDER, TITLE = (24, 26, 33), (220, 223, 228), (90, 94, 104), (150, 154, 164)


def screen_at(raw, cols, rows, cut_after, nth):
    if cut_after:
        matches = list(re.finditer(cut_after.encode(), raw))
        if len(matches) < nth:
            sys.exit(f"term_screenshot: '{cut_after}' matches {len(matches)} times, fewer than {nth}")
        raw = raw[: matches[nth - 1].end()]
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    stream.feed(raw)
    return screen.display, (screen.cursor.x, screen.cursor.y)


def draw(lines, cursor, cols, rows, out, title):
    font = ImageFont.truetype(FONT, 15)
    cw = round(font.getlength("M"))
    ch = 19
    pad, top = 14, 30 if title else 14
    w, h = 2 * pad + cols * cw, top + pad + rows * ch
    img = Image.new("RGB", (w, h), BG)
    d = ImageDraw.Draw(img)
    d.rectangle([0, 0, w - 1, h - 1], outline=BORDER)
    if title:
        d.text((pad, 8), title, font=ImageFont.truetype(FONT, 12), fill=TITLE)
        d.line([(0, top - 6), (w, top - 6)], fill=BORDER)
    for y, line in enumerate(lines):
        d.text((pad, top + y * ch), line.rstrip(), font=font, fill=FG)
    x, y = cursor
    if y < rows and x < cols:  # the cursor, as a block
        d.rectangle([pad + x * cw, top + y * ch + 2, pad + (x + 1) * cw - 1, top + (y + 1) * ch - 2], fill=(120, 124, 134))
    img.save(out, optimize=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("raw")
    ap.add_argument("out")
    ap.add_argument("--cols", type=int, default=80)
    ap.add_argument("--rows", type=int, default=24)
    ap.add_argument("--cut-after")
    ap.add_argument("--nth", type=int, default=1)
    ap.add_argument("--title")
    ap.add_argument("--trim", action="store_true")
    a = ap.parse_args()
    lines, cursor = screen_at(open(a.raw, "rb").read(), a.cols, a.rows, a.cut_after, a.nth)
    rows = a.rows
    if a.trim:
        rows = max([i + 1 for i, l in enumerate(lines) if l.strip()] + [cursor[1] + 1]) + 1
        lines = lines[:rows]
    draw(lines, cursor, a.cols, rows, a.out, a.title)


if __name__ == "__main__":
    main()
