"""The directories `tclamp install-tcl` made for its index, as the index
records them, and their removal.  Standard library only: `make
uninstall-tcl` runs this file with any python3 when the environment whose
tclamp wrote the index is gone,

    python3 -I src/tclamp/install_record.py INDEX

which removes INDEX, then those directories that are empty (-I: the
directory of this file, whose modules have the standard library's names,
is not on sys.path).
"""
import json
import sys
from pathlib import Path

MADE = "# made by install-tcl: "


def made_by_install(index):
    """The directories that the install-tcl which wrote `index` made."""
    try:
        for line in Path(index).read_text(errors="replace").splitlines():
            if line.startswith(MADE):
                made = json.loads(line[len(MADE):])
                return [d for d in made if isinstance(d, str)] if isinstance(made, list) else []
    except (OSError, ValueError):
        pass
    return []


def own_places(places, index):
    """Those of `places` that install-tcl can have made for `index`: its
    directory and that directory's parents, named as the index is (an
    edited record may name any directory: elsewhere, relative, or out of
    the tree by `..`, which only the index's own directory, as named, may
    hold).  A place below a recorded one that is a symbolic link now is
    not the directory install-tcl made there: it is left too."""
    index_dir = Path(index).absolute().parent
    own = {index_dir, *index_dir.parents}
    recorded = set(map(Path, places))
    return [place for place in map(Path, places)
            if place in own and (".." not in place.parts or place == index_dir)
            and not any(above.is_symlink() for above in place.parents if above in recorded)]


def remove_empty(places, index):
    """Removes each of `places` that install-tcl can have made for `index`
    (own_places) and is a directory (not a symbolic link, which install-tcl
    does not make) with nothing in it, the deepest first; returns those it
    removed."""
    removed = []
    for place in sorted(own_places(places, index), key=lambda p: len(p.parts), reverse=True):
        if place.is_dir() and not place.is_symlink() and not any(place.iterdir()):
            place.rmdir()
            removed.append(place)
    return removed


if __name__ == "__main__":
    index = Path(sys.argv[1])
    if index.is_symlink():
        sys.exit(f"make uninstall-tcl: {index} is a symbolic link, which install-tcl "
                 "does not write: left as it is")
    places = made_by_install(index)
    index.unlink(missing_ok=True)
    try:
        remove_empty(places, index)
    except OSError as error:
        sys.exit(f"make uninstall-tcl: {error}")
