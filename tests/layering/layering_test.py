#!/usr/bin/env python3
"""The layering test: every #include of the libraries points one way.

docs/ARCHITECTURE.md holds the ground truth in its ```layering block: which libraries each
library may include, and the rooms of sim/ lowest first, each of which may include only
itself and the rooms before it. This script reads that block and checks every source and
header of the libraries (benchmarks, tests and generated files are not checked) against it:
  - an #include "comptrain/LIB/..." from a library that does not name LIB;
  - in sim/, an include of a later room ("comptrain/sim/ROOM/..." or the private "ROOM/...");
  - a sim/ header or source outside the rooms the block lists, or a room the block lists that
    has no folder;
  - <simgrid/...> outside sim/'s engine room (the only room that knows SimGrid).
Each violation is printed as FILE:LINE: what, and the test fails.
Usage: layering_test.py REPOSITORY-ROOT
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
arch = os.path.join(root, "docs", "ARCHITECTURE.md")
text = open(arch, encoding="utf-8").read()
m = re.search(r"```layering\n(.*?)```", text, re.S)
if not m:
    print(f"{arch}: no ```layering block; expected the libraries' and rooms' order there")
    sys.exit(1)

libraries = {}  # name -> (folder, set of libraries it may include)
rooms = []
section = None
for number, line in enumerate(m.group(1).splitlines(), 1):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    if line.endswith(":") and " " not in line[:-1]:
        section = line[:-1]
        continue
    if section == "libraries":
        # NAME (FOLDER): DEP DEP ...
        lm = re.fullmatch(r"([a-z_]+) \(([a-z_/]+)/\):(.*)", line)
        if not lm:
            print(f"{arch}: layering block line '{line}'; expected 'NAME (FOLDER/): LIBRARY ...'")
            sys.exit(1)
        libraries[lm.group(1)] = (lm.group(2), set(lm.group(3).split()))
    elif section == "rooms":
        rooms.extend(word.strip() for word in line.split("->") if word.strip())
if not libraries or not rooms:
    print(f"{arch}: the layering block needs a 'libraries:' and a 'rooms:' section")
    sys.exit(1)
rank = {room: i for i, room in enumerate(rooms)}

# The longest folder first, so that traces/zoo/ wins over traces/.
folders = sorted(((folder, name) for name, (folder, _) in libraries.items()), key=lambda f: -len(f[0]))


def library_of(path):
    for folder, name in folders:
        if path.startswith(folder + "/"):
            return name
    return None


def sim_room_of(path):
    for prefix in ("sim/include/comptrain/sim/", "sim/src/"):
        if path.startswith(prefix):
            rest = path[len(prefix):]
            return rest.split("/", 1)[0] if "/" in rest else ""
    return None


# Includes that the restructuring has not yet removed: each names the split that removes it.
# This set only shrinks; the test fails on any other violation and on an entry that no longer occurs.
PENDING = set()
pending_seen = set()

include = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
violations = []
checked = 0
for folder, name in folders:
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if d not in ("bench", "python", "__pycache__") and not d.startswith("build")]
        for filename in filenames:
            if not re.search(r"\.(hpp|cpp|h|cu|cuh)$", filename):
                continue
            path = os.path.normpath(os.path.join(rel_dir, filename))
            if library_of(path) != name:
                continue  # a nested library's file, checked as that one's
            checked += 1
            room = sim_room_of(path) if name == "sim" else None
            if room is not None and room not in rank:
                violations.append(f"{path}:1: in sim/ outside the rooms ({', '.join(rooms)}); expected sim/src/ROOM/ or sim/include/comptrain/sim/ROOM/")
                continue
            allowed = libraries[name][1] | {name}
            with open(os.path.join(root, path), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    im = include.match(line)
                    if not im:
                        continue
                    target = im.group(2)
                    if im.group(1) == "<":
                        if target.startswith("simgrid/") and room != "engine":
                            violations.append(f"{path}:{number}: includes <{target}>; only sim/'s engine room includes SimGrid")
                        continue
                    lib = re.match(r"comptrain/([a-z_]+)/", target)
                    if lib:
                        if lib.group(1) not in allowed:
                            violations.append(f"{path}:{number}: includes \"{target}\"; {name} may include only {', '.join(sorted(allowed))}")
                            continue
                        if lib.group(1) != "sim" or room is None:
                            continue
                        target_room = target[len("comptrain/sim/"):].split("/", 1)[0] if target.count("/") >= 3 else ""
                    elif room is not None and "/" in target:
                        target_room = target.split("/", 1)[0]  # a private header, "ROOM/NAME.hpp" under sim/src
                    else:
                        continue
                    if target_room not in rank:
                        violations.append(f"{path}:{number}: includes \"{target}\", outside the rooms ({', '.join(rooms)})")
                    elif rank[target_room] > rank[room] and (path, target) in PENDING:
                        pending_seen.add((path, target))
                    elif rank[target_room] > rank[room]:
                        violations.append(f"{path}:{number}: includes \"{target}\": room {room} may include only {', '.join(rooms[:rank[room] + 1])}")

for room in rooms:
    if not any(os.path.isdir(os.path.join(root, p, room)) for p in ("sim/src", "sim/include/comptrain/sim")):
        violations.append(f"{arch}:1: room '{room}' has no folder sim/src/{room}/ or sim/include/comptrain/sim/{room}/")

for path, target in sorted(PENDING - pending_seen):
    violations.append(f"{path}:1: no longer includes \"{target}\": remove it from PENDING in {sys.argv[0]}")
if PENDING & pending_seen:
    print(f"layering: {len(PENDING & pending_seen)} pending upward include(s) still to remove (PENDING)")
for v in violations:
    print(v)
print(f"layering: {checked} files checked, {len(violations)} violation(s)")
sys.exit(1 if violations else 0)
