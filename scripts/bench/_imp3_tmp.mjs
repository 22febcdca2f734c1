import { loadPyodide } from "pyodide";
const pyodide = await loadPyodide();
const result = await pyodide.runPythonAsync(`
import time, dataclasses, cProfile, pstats, io
from dataclasses import dataclass, field
src = '''
from __future__ import annotations
@dataclass(frozen=True, slots=True)
class A{i}:
    """doc"""
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()
    d: int | None = None
'''
def make(i, kw):
    ns = {"dataclass": dataclass, "field": field, "__name__": "__main__"}
    exec(compile(src.replace("{i}", str(i)).replace("frozen=True, slots=True", kw), "m", "exec"), ns)
out = []
for kw in ("frozen=True, slots=True", "frozen=True", "slots=True", "", "eq=False", "eq=False, repr=False"):
    for i in range(5): make(i, kw)
    t = time.perf_counter()
    for i in range(50): make(i, kw)
    out.append((kw, round((time.perf_counter()-t)/50*1000, 3)))
src3 = '''
from __future__ import annotations
from typing import NamedTuple
class C{i}(NamedTuple):
    """doc"""
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()
    d: int | None = None
'''
t = time.perf_counter()
for i in range(50): exec(compile(src3.replace("{i}", str(i)), "m", "exec"), {"__name__": "__main__"})
out.append(("NamedTuple incl compile", round((time.perf_counter()-t)/50*1000, 3)))
# plain class, exec only
src2 = '''
class B:
    __slots__ = ("a","b","c","d")
    def __init__(self, a, b="x", c=(), d=None):
        self.a = a; self.b = b; self.c = c; self.d = d
'''
t = time.perf_counter()
for i in range(50): exec(compile(src2, "m", "exec"), {"__name__": "__main__"})
out.append(("plain class incl compile", round((time.perf_counter()-t)/50*1000, 3)))
code = compile(src2, "m", "exec")
t = time.perf_counter()
for i in range(50): exec(code, {"__name__": "__main__"})
out.append(("plain class precompiled", round((time.perf_counter()-t)/50*1000, 3)))
pr = cProfile.Profile(); pr.enable()
for i in range(50): make(i, "frozen=True, slots=True")
pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12)
str(out) + "\\n" + s.getvalue()
`);
process.stdout.write(`${result}\n`);
