#!/usr/bin/env python3
"""Sums a `perf record -g` profile of the Temporal dev server by component.

Usage: perfsum.py PERF_DATA [UNSTRIPPED_TEMPORAL_BINARY]

Prints the share of samples whose stack contains each component (inclusive, so shares
overlap), and the SQLite share by the persistence method that called it. The released
Temporal CLI is stripped; give an unstripped build of the same version (same text layout)
and the unnamed frames are named with `go tool addr2line`.
"""
import collections
import re
import subprocess
import sys

COMPONENTS = {
    'sqlite': 'modernc.org/sqlite',
    'visibility': 'persistence/visibility',
    'history service': 'service/history',
    'matching service': 'service/matching',
    'frontend service': 'service/frontend',
    'grpc': 'google.golang.org/grpc',
    'protobuf': 'google.golang.org/protobuf',
    'gc': 'runtime.gcBgMarkWorker',
    'malloc': 'runtime.mallocgc',
}
# The SQL store method a SQLite frame was called from, e.g. db.ReplaceIntoVisibility.
STORE_METHOD = re.compile(
    r'go\.temporal\.io/server/common/persistence/(?:sql|visibility/store/sql)\S*?\.\(\*?(\w+)\)\.(\w+)')
# perf reports a stripped binary's frames as offsets into it; the text starts at 0x400000.
TEXT_BASE = 0x400000


def perf_script(data):
    return subprocess.run(['perf', 'script', '-i', data, '-F', 'comm,ip,sym'],
                          capture_output=True, text=True, check=True).stdout


def name_unknown_frames(out, binary):
    ips = sorted(set(re.findall(r'^\s+([0-9a-f]+) \[unknown\]', out, re.M)))
    query = '\n'.join(hex(int(ip, 16) + TEXT_BASE) for ip in ips) + '\n'
    lines = subprocess.run(['go', 'tool', 'addr2line', binary], input=query,
                           capture_output=True, text=True, check=True).stdout.split('\n')
    names = {ip: lines[2 * i] for i, ip in enumerate(ips)}  # name, then file:line
    return re.sub(r'^(\s+)([0-9a-f]+) \[unknown\]',
                  lambda m: m.group(1) + m.group(2) + ' ' + names.get(m.group(2), '[unknown]'),
                  out, flags=re.M)


def samples(out):
    """Each sample's frames, innermost first."""
    stack = []
    for line in out.split('\n'):
        if line.startswith((' ', '\t')) and line.strip():
            parts = line.split(None, 1)
            stack.append(parts[1] if len(parts) > 1 else parts[0])
        elif stack:
            yield stack
            stack = []
    if stack:
        yield stack


def main():
    out = perf_script(sys.argv[1])
    if len(sys.argv) > 2:
        out = name_unknown_frames(out, sys.argv[2])
    total = 0
    by_component = collections.Counter()
    sqlite_by_method = collections.Counter()
    for stack in samples(out):
        total += 1
        joined = ' '.join(stack)
        for name, needle in COMPONENTS.items():
            if needle in joined:
                by_component[name] += 1
        if COMPONENTS['sqlite'] in joined:
            method = next((m.group(1) + '.' + m.group(2) for m in map(STORE_METHOD.search, stack) if m), '?')
            sqlite_by_method[method] += 1
    print(f'samples {total}')
    for name, n in by_component.most_common():
        print(f'  {name:<18} {100 * n / total:5.1f}%')
    print('sqlite by the store method that called it:')
    for name, n in sqlite_by_method.most_common(12):
        print(f'  {name:<40} {100 * n / total:5.1f}%')


if __name__ == '__main__':
    main()
