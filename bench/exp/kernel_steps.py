#!/usr/bin/env python3
"""Per-step kernel times of a CUPTI trace (bench/exp/cupti_trace.c): the last
11 steps between the starts of emb_fwd_kernel (one a step); per kernel name,
grid and block the median time a step. Usage: kernel_steps.py TRACE.csv[.gz]"""
import collections
import csv
import gzip
import re
import statistics
import sys


def short(name):
    m = re.match(r"_Z\d+(\w+?)(I|P|i|l|f|S|E|v|R|N|$)", name)
    if name.startswith("_ZN"):
        parts = re.findall(r"(\d+)([A-Za-z_]\w*)", name[3:])
        out, rest = [], name[3:]
        while rest and rest[0].isdigit():
            n = int(re.match(r"\d+", rest).group(0))
            d = len(str(n))
            out.append(rest[d:d + n])
            rest = rest[d + n:]
        return "::".join(out) or name[:60]
    if m:
        n = re.match(r"_Z(\d+)", name)
        k = int(n.group(1))
        return name[len(n.group(0)):len(n.group(0)) + k]
    return name[:80]


op = gzip.open if sys.argv[1].endswith('.gz') else open
rows=[r for r in csv.DictReader(op(sys.argv[1],'rt'))]
anc=sorted(int(r['start_ns']) for r in rows if 'emb_fwd_kernel' in r['name'])
print('anchors',len(anc))
a=anc[-12:]
per=collections.defaultdict(list)
spans=[]
for i in range(len(a)-1):
    t0,t1=a[i],a[i+1]; spans.append(t1-t0)
    c=collections.Counter(); n=collections.Counter()
    for r in rows:
        s=int(r['start_ns'])
        if t0<=s<t1:
            k=r['kind']+':'+short(r['name'])+' g'+r['grid']+' b'+r['block']
            c[k]+=int(r['end_ns'])-s; n[k]+=1
    for k in c: per[k].append((c[k],n[k]))
sp=statistics.median(spans)
tot=0
out=[]
for k,v in per.items():
    d=statistics.median([x[0] for x in v]); cnt=v[0][1]; tot+=d; out.append((d,cnt,k))
out.sort(reverse=True)
for d,cnt,k in out: print(f'{d/1e3:8.1f} us {cnt:3d}x  {k[:110]}')
print(f'step span {sp/1e3:.1f} us, kernel sum {tot/1e3:.1f} us')
