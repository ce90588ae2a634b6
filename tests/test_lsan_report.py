"""The LeakSanitizer report's attribution (the report itself runs as a tool, not in CI)."""
from torch_tpu.tools import lsan_report

REPORT = """
=================================================================
==1==ERROR: LeakSanitizer: detected memory leaks

Direct leak of 64 byte(s) in 1 object(s) allocated from:
    #0|/usr/lib/x86_64-linux-gnu/liblsan.so.0|operator new(unsigned long)|<null>
    #1|/work/torch_tpu/_C.cpython-311-x86_64-linux-gnu.so|tpu::ir::Graph::add_node(int)|<null>
    #2|/usr/lib/libpython3.11.so.1.0|PyObject_Call|<null>

Indirect leak of 32 byte(s) in 1 object(s) allocated from:
    #0|/usr/lib/x86_64-linux-gnu/liblsan.so.0|malloc|<null>
    #1|/usr/lib/libpython3.11.so.1.0|PyMem_Malloc|<null>
    #2|/work/torch_tpu/_C.cpython-311-x86_64-linux-gnu.so|tpu::python::f()|<null>

SUMMARY: LeakSanitizer: 96 byte(s) leaked in 2 allocation(s).
"""


def test_each_leak_is_owned_by_the_first_library_past_the_allocator():
    leaks = lsan_report.parse(REPORT)
    assert [(kind, size, owner) for kind, size, owner, _ in leaks] == [
        ("Direct", 64, "_C.cpython-311-x86_64-linux-gnu.so"), ("Indirect", 32, "libpython3.11.so.1.0")]
    assert leaks[0][3][0].endswith("tpu::ir::Graph::add_node(int)")
    assert lsan_report.OURS.match(leaks[0][2]) and not lsan_report.OURS.match(leaks[1][2])
