"""The pytest plugin under pytest-xdist: each worker records and checks the calls of its own tests, and hands what
it found to the controller (config.workeroutput, read in pytest_testnodedown, as pytest-cov does), which prints one
table. The controller names a folder to the workers (config.workerinput, as pytest-memray does), where a worker
claims a signature before it checks it, by creating a file of that name (os.link, which fails where the file
exists): so a signature is checked once across workers. The file holds what the call's signature shows, so that
each worker ranks its own calls against what every worker has checked.
"""
import contextlib
import json
import os
import shutil
import tempfile

CLAIMS = "backward_check_claims"   # the workerinput key of the folder


def is_controller(config):
    """Whether this process is pytest-xdist's controller, which runs no test itself."""
    return (not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no"
            and bool(config.getoption("tx", None)))


def worker_of(config):
    """(the worker's id, the number of workers, the claims folder), or None outside a pytest-xdist worker."""
    given = getattr(config, "workerinput", None)
    if given is None:
        return None
    return given["workerid"], int(given.get("workercount", 1)), given.get(CLAIMS)


def new_claims_folder():
    return tempfile.mkdtemp(prefix="backward-check-claims-")


def remove_claims_folder(folder):
    shutil.rmtree(folder, ignore_errors=True)


class Claims:
    """A worker's claims, in the folder every worker shares."""

    def __init__(self, folder, worker):
        self.folder, self.worker = folder, worker
        self.read = set()   # the claims already read (this worker's own among them)

    def claim(self, call):
        """True where this worker is the first to claim the call's signature (it checks it), False where another
        worker did."""
        name = call.key
        self.read.add(name)
        try:
            handle, written = tempfile.mkstemp(prefix=f".{self.worker}-", dir=self.folder)
        except OSError:  # no shared folder (a worker on another machine): checked here, and maybe elsewhere too
            return True
        try:
            with os.fdopen(handle, "w") as file:
                json.dump({"op": call.name, "features": sorted(call.features), "worker": self.worker}, file)
            os.link(written, os.path.join(self.folder, name))  # whole, or not at all
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.remove(written)

    def others(self):
        """[(op name, features)] of the signatures other workers have claimed since this was last called."""
        found = []
        if not os.path.isdir(self.folder):
            return found
        for entry in os.scandir(self.folder):
            if entry.name.startswith(".") or entry.name in self.read:
                continue
            self.read.add(entry.name)
            try:
                with open(entry.path) as file:
                    claimed = json.load(file)
                found.append((claimed["op"], claimed["features"]))
            except (OSError, ValueError, KeyError):
                continue  # a claim that cannot be read ranks nothing
        return found
