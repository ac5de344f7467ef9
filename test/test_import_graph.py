"""
The package's import graph, read from the source, has no circle.

Every import counts, wherever it stands: at the top, inside a function or under TYPE_CHECKING,
since an import moved into a function still ties the two modules together. Importing a module
also runs its package's __init__.py; that edge is left out, or every package whose __init__.py
re-exports its parts would be a circle. An import of a package's name (`from ..engine import
Sampling`) is an edge to its __init__.py like any other.
"""

import ast
from pathlib import Path
from typing import Dict, Iterable, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / 'physinf_ros'


def module_files(root: Path) -> Dict[str, Path]:
    """Every module under root by dotted name; a package by its own name (its __init__.py)."""
    modules = {}
    for path in sorted(root.rglob('*.py')):
        parts = path.relative_to(root.parent).with_suffix('').parts
        if parts[-1] == '__init__':
            parts = parts[:-1]
        modules['.'.join(parts)] = path
    return modules


def imported(name: str, path: Path, modules: Iterable[str]) -> Set[str]:
    """Return the modules of `modules` that the module `name` (its source at path) imports."""
    modules = set(modules)
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split('.')
                base = base[:len(base) - (node.level - 1)]
                source = '.'.join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod.
            candidates = [f'{source}.{alias.name}' if f'{source}.{alias.name}' in modules
                          else source for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:   # `import a.b.c`: its longest module
                candidate = candidate.rpartition('.')[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def import_graph(root: Path) -> Dict[str, Set[str]]:
    """Map each module under root to the modules under root it imports."""
    modules = module_files(root)
    return {name: imported(name, path, modules) for name, path in modules.items()}


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Return the strongly connected components of two or more modules (Tarjan), sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_package_has_no_import_circle():
    graph = import_graph(PACKAGE)
    assert 'physinf_ros.engine.base' in graph and len(graph) > 40, 'the package was not found'
    found = circles(graph)
    assert not found, 'import circles (each line: modules that import each other around):\n' + (
        '\n'.join(', '.join(component) for component in found))


def test_the_graph_sees_imports_in_functions_and_type_checking_blocks(tmp_path):
    # The checker itself: a circle closed only by a function's import, and one closed by a
    # TYPE_CHECKING import through a package's name, are both found.
    pkg = tmp_path / 'pkg'
    (pkg / 'sub').mkdir(parents=True)
    (pkg / '__init__.py').write_text('from .a import A\n')
    (pkg / 'a.py').write_text('from .sub import b\nA = 1\n')
    (pkg / 'sub' / '__init__.py').write_text('')
    (pkg / 'sub' / 'b.py').write_text('def f():\n    from ..a import A\n    return A\n')
    (pkg / 'c.py').write_text('from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n'
                              '    from pkg import A\n')
    (pkg / 'd.py').write_text('import pkg.c\n')
    graph = import_graph(pkg)
    assert graph['pkg'] == {'pkg.a'}
    assert graph['pkg.a'] == {'pkg.sub.b'} and graph['pkg.sub.b'] == {'pkg.a'}
    assert graph['pkg.c'] == {'pkg'} and graph['pkg.d'] == {'pkg.c'}
    assert circles(graph) == [['pkg.a', 'pkg.sub.b']]
    (pkg / 'a.py').write_text('import pkg.c\nA = 1\n')   # a -> c -> pkg -> a
    assert circles(import_graph(pkg)) == [['pkg', 'pkg.a', 'pkg.c']]
