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


def remove_empty(places):
    """Removes each of `places` that is a directory (not a symbolic link,
    which install-tcl does not make) with nothing in it, the deepest first;
    returns those it removed."""
    removed = []
    for place in sorted(map(Path, places), key=lambda p: len(p.parts), reverse=True):
        if place.is_dir() and not place.is_symlink() and not any(place.iterdir()):
            place.rmdir()
            removed.append(place)
    return removed


if __name__ == "__main__":
    index = Path(sys.argv[1])
    places = made_by_install(index)
    index.unlink(missing_ok=True)
    try:
        remove_empty(places)
    except OSError as error:
        sys.exit(f"make uninstall-tcl: {error}")
