"""The saved profile that the profiling page includes: rank 0's table records the machine, and shows the
gradient all_reduce next to the matmuls, as the page says."""

from markdown_fences import REPO

TABLE = REPO / "benchmarks" / "profile-ddp-cpu.txt"


def test_saved_table_records_the_machine_and_shows_the_all_reduce_next_to_the_matmuls():
    lines = TABLE.read_text().splitlines()
    assert lines[0].startswith("# rank 0 of 2, ") and "torch " in lines[0]
    operators = {line.split()[0] for line in lines[1:] if line.strip()}  # each row starts with its name
    assert {"c10d::allreduce_", "aten::mm", "aten::addmm"} <= operators, operators
