"""Tables that never cut a number.

A ``Grid`` is the data of a table: a title, the columns (header, numeric or
not) and rows of strings, with rule lines before some rows (a total row).
``print_grid`` prints it with rich when stdout is a terminal wide enough for
every cell whole, and as plain aligned text otherwise (stdout a file or a
pipe, or a terminal narrower than the table: the terminal then wraps the long
lines, it cuts nothing). ``to_rich`` makes the rich ``Table`` (numeric
columns never wrap, and fold rather than cut if rich must narrow them), for
``rich.print(report)`` in a notebook.
"""

import dataclasses
import sys


@dataclasses.dataclass
class Column:
    header: str
    #: right-justified and never wrapped (numbers)
    numeric: bool = False


@dataclasses.dataclass
class Grid:
    title: str
    columns: list
    rows: list = dataclasses.field(default_factory=list)
    #: indices of the rows that a rule line precedes
    rules: set = dataclasses.field(default_factory=set)
    #: indices of the rows printed bold (totals)
    bold: set = dataclasses.field(default_factory=set)

    def add_row(self, *cells, rule=False, bold=False):
        if rule:
            self.rules.add(len(self.rows))
        if bold:
            self.bold.add(len(self.rows))
        self.rows.append(tuple("" if c is None else str(c) for c in cells))


def to_rich(grid):
    """The grid as a ``rich.table.Table``."""
    from rich.table import Table

    table = Table(title=grid.title)
    for index, column in enumerate(grid.columns):
        if column.numeric:
            table.add_column(column.header, justify="right", no_wrap=True, overflow="fold",
                             min_width=_width(grid, index))
        else:
            table.add_column(column.header, overflow="fold")
    for index, row in enumerate(grid.rows):
        if index in grid.rules:
            table.add_section()
        table.add_row(*row, style="bold" if index in grid.bold else None)
    return table


def to_text(grid):
    """The grid as plain lines: every cell whole, columns aligned, two spaces apart."""
    headers = [c.header.replace("\n", " ") for c in grid.columns]
    widths = [max([len(h)] + [len(row[i]) for row in grid.rows])
              for i, h in enumerate(headers)]

    def line(cells):
        parts = [cell.rjust(w) if c.numeric else cell.ljust(w)
                 for cell, w, c in zip(cells, widths, grid.columns)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    lines = [grid.title, line(headers), rule] if grid.title else [line(headers), rule]
    for index, row in enumerate(grid.rows):
        if index in grid.rules:
            lines.append(rule)
        lines.append(line(row))
    return "\n".join(lines)


def print_grid(grid, file=None):
    """Print ``grid``: rich on a terminal wide enough, plain text otherwise."""
    from rich.console import Console

    file = file or sys.stdout
    console = Console(file=file)
    if console.is_terminal:
        table = to_rich(grid)
        wide = console.options.update_width(10**6)  # unclamped: the table's own width
        if console.measure(table, options=wide).maximum <= console.width:
            console.print(table)
            return
    print(to_text(grid), file=file)
    print(file=file)


def _width(grid, index):
    return max([len(row[index]) for row in grid.rows] or [1])
