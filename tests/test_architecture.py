"""The package's shape: stage subpackages, no import cycles, no private names across modules."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "trappm_ray"
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every trappm_ray import, at any depth."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("trappm_ray")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("trappm_ray"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    found.append((sub, []))
                else:
                    found.append((base, [alias.name]))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m, _ in _imports(path, modules) if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_private_names_imported_across_modules():
    modules = _modules()
    offenders = []
    for path in [*modules.values(), *ROOT.glob("jobs/*.py"), *ROOT.glob("benchmarks/*.py"),
                 *ROOT.glob("experiments/*.py")]:
        for mod, names in _imports(path, modules):
            offenders += [f"{path.relative_to(ROOT)}: {mod}.{n}" for n in names if n.startswith("_")]
    assert offenders == []


def test_modules_stay_small():
    big = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    assert {n: k for n, k in big.items() if k > MAX_LINES} == {}


def test_stages_are_subpackages():
    for stage in ("graph", "corpus", "labels", "model", "train", "evaluate", "serving"):
        assert (PACKAGE / stage / "__init__.py").is_file(), stage
    flat = {p.stem for p in PACKAGE.glob("*.py")}
    shared = {"__init__", "cli", "config_cli", "devices", "errors", "presets", "ray_init", "storage",
              "targets"}
    assert flat <= shared, flat - shared


# The order data flows through the package: a module imports its own stage and those before it,
# never a later one (function-local imports included: ast.walk sees every import at any depth).
STAGES = ("shared", "graph", "physics", "corpus", "labels", "model", "train", "evaluate", "serving", "entry")
SHARED = {"errors", "storage", "devices", "targets", "config_cli", "ray_init"}


def _stage(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("cli", "presets", "__init__"):
        return "entry"
    return "shared" if parts[1] in SHARED else parts[1]


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                  if STAGES.index(_stage(b)) > STAGES.index(_stage(a)))


def test_imports_point_down_the_stages():
    assert {_stage(m) for m in _modules()} <= set(STAGES)
    assert _upward(_graph()) == []


def test_an_import_up_the_stages_is_found():
    assert _upward({"trappm_ray.corpus.keys": {"trappm_ray.labels.store", "trappm_ray.graph.rows"},
                    "trappm_ray.storage": set()}) == ["trappm_ray.corpus.keys -> trappm_ray.labels.store"]
