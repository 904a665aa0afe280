"""`migfit deploy render`: the checked-in generated files are what the command produces, and
`--check` notices when one is not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from deploy_manifests import DEPLOY, REPO

from migfit import profiles
from migfit.commands import deploy


def migfit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "migfit.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False, cwd=REPO)


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    return copy


def test_checked_in_files_are_up_to_date() -> None:
    done = migfit("deploy", "render", "--check", "--dir", str(DEPLOY))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


def test_render_output_matches_the_files_byte_for_byte() -> None:
    for rel, text in deploy.render(profiles.builtin()).items():
        assert (DEPLOY / rel).read_text(encoding="utf-8") == text, rel


def test_check_fails_with_a_diff_when_a_generated_file_is_altered(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    config = copy / deploy.SECOND_SCHEDULER_CONFIG
    config.write_text(
        config.read_text(encoding="utf-8").replace("- name: nvidia.com/mig-3g.40gb\n"
                                                   "    ignoredByScheduler: false\n", ""),
        encoding="utf-8")
    done = migfit("deploy", "render", "--check", "--dir", str(copy))
    assert done.returncode == 1
    assert "+  - name: nvidia.com/mig-3g.40gb" in done.stdout
    assert "1 generated file(s) out of date" in done.stderr
    assert "migfit deploy render" in done.stderr
    # --check writes nothing.
    assert "- name: nvidia.com/mig-3g.40gb\n" not in config.read_text(encoding="utf-8")


def test_check_fails_when_a_generated_file_is_missing_and_render_restores_it(
    tmp_path: Path,
) -> None:
    copy = _copy(tmp_path)
    (copy / deploy.DEFAULT_SCHEDULER_SNIPPET).unlink()
    assert migfit("deploy", "render", "--check", "--dir", str(copy)).returncode == 1
    done = migfit("deploy", "render", "--dir", str(copy))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"wrote {copy / deploy.DEFAULT_SCHEDULER_SNIPPET} from the MIG "
                           f"catalog\n")
    assert migfit("deploy", "render", "--check", "--dir", str(copy)).returncode == 0
    assert (copy / deploy.DEFAULT_SCHEDULER_SNIPPET).read_bytes() == (
        DEPLOY / deploy.DEFAULT_SCHEDULER_SNIPPET).read_bytes()


def test_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    done = migfit("deploy", "render", "--check", "--dir", str(tmp_path / "nope"))
    assert done.returncode == 2
    assert "not a directory" in done.stderr and "Traceback" not in done.stderr


def test_render_says_in_one_line_when_nothing_needed_writing(tmp_path: Path) -> None:
    """It printed nothing at all: a user could not tell whether it had run."""
    copy = _copy(tmp_path)
    done = migfit("deploy", "render", "--dir", str(copy))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"{copy / deploy.SECOND_SCHEDULER_CONFIG} and "
                           f"{copy / deploy.DEFAULT_SCHEDULER_SNIPPET} already match the MIG "
                           f"catalog: nothing written\n")


def test_render_help_says_what_it_writes() -> None:
    done = migfit("deploy", "render", "--help")
    assert done.returncode == 0
    assert "KubeSchedulerConfiguration" in done.stdout and "managedResources" in done.stdout


def test_check_of_a_stale_tree_names_the_render_that_mends_it(tmp_path: Path) -> None:
    """The suggestion was `migfit deploy render`, which writes ./deploy, not the --dir
    checked."""
    copy = _copy(tmp_path)
    (copy / deploy.DEFAULT_SCHEDULER_SNIPPET).unlink()
    done = migfit("deploy", "render", "--check", "--dir", str(copy))
    assert done.returncode == 1
    assert done.stderr == (f"1 generated file(s) out of date: run `migfit deploy render --dir "
                           f"{copy}`\n")


def test_check_of_a_folder_with_none_of_the_files_says_so_in_one_line(tmp_path: Path) -> None:
    """An empty folder got some 680 lines of diff. A wrong --dir is a usage error (2), as a
    missing one is, not the "out of date" of exit 1 that a CI job reads."""
    done = migfit("deploy", "render", "--check", "--dir", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"migfit: error: --dir {tmp_path} holds none of the generated files "
        f"({deploy.SECOND_SCHEDULER_CONFIG} and {deploy.DEFAULT_SCHEDULER_SNIPPET}): pass "
        f"--dir the deploy/ folder, or write them there with `migfit deploy render --dir "
        f"{tmp_path}`\n")
