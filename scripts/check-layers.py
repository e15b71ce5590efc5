#!/usr/bin/env python3
"""Fails when an #include points up the layers of src/ (src/layers.txt, top first).

A file of src/<layer>/ may include "chorus/..." (the public API), headers of its own layer and
headers of the layers listed below it. The public headers may include only each other. tools/,
python/, tests/, bench/ and examples/ are above every layer. Prints each offending include
as path:line and exits 1, or prints a one-line summary and exits 0.

  scripts/check-layers.py [repository root]   (default: the parent of this script's folder)
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = ('.h', '.hpp', '.cc', '.cpp')


def read_layers(root):
    layers = []
    for line in (root / 'src' / 'layers.txt').read_text().splitlines():
        name = line.split('#', 1)[0].strip()
        if name:
            layers.append(name)
    if not layers:
        sys.exit('check-layers: src/layers.txt lists no layers')
    return layers


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    layers = read_layers(root)
    rank = {name: i for i, name in enumerate(layers)}
    problems = []
    checked = 0

    on_disk = {p.name for p in (root / 'src').iterdir() if p.is_dir()}
    for folder in sorted(on_disk - set(layers)):
        problems.append(f'src/{folder}/: not a layer of src/layers.txt')
    for name in layers:
        if name not in on_disk:
            problems.append(f'src/layers.txt: layer "{name}" has no folder src/{name}/')

    for path in sorted((root / 'src').rglob('*')):
        if path.suffix not in SOURCES:
            continue
        rel = path.relative_to(root)
        mine = rel.parts[1]
        if mine not in rank:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            checked += 1
            target = m.group(1)
            top = target.split('/', 1)[0] if '/' in target else None
            if top == 'chorus':
                continue
            if top is None:
                # A header beside the file: the same layer, if it is there.
                if not (path.parent / target).exists():
                    problems.append(f'{rel}:{number}: "{target}" is not beside the file; '
                                    'include it by its path under src/')
                continue
            if top not in rank:
                problems.append(f'{rel}:{number}: "{target}" is in no layer of src/layers.txt')
            elif rank[top] < rank[mine]:
                problems.append(f'{rel}:{number}: {mine} includes "{target}", of {top}, '
                                f'a layer above it ({" > ".join(layers)})')

    for path in sorted((root / 'include').rglob('*')):
        if path.suffix not in SOURCES:
            continue
        rel = path.relative_to(root)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if m:
                checked += 1
                if not m.group(1).startswith('chorus/'):
                    problems.append(f'{rel}:{number}: the public headers include only "chorus/..."'
                                    f', not "{m.group(1)}"')

    if problems:
        print('\n'.join(problems))
        print(f'check-layers: {len(problems)} include(s) against the layers', file=sys.stderr)
        return 1
    print(f'check-layers: {checked} includes follow the layers {" > ".join(layers)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
