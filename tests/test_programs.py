"""Real programs on the mount: tar, git, cp -a, diff -r."""

import os
import shutil
import subprocess

import pytest

from helpers import assert_same_tree, make_sample_tree, pattern, write_file


def run(*cmd, cwd=None, env=None):
    cp = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                        stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, f"{' '.join(map(str, cmd))} -> {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    return cp.stdout


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "src"
    make_sample_tree(root)
    os.chown(root / "private", 4001, 4002)
    os.chown(root / "dangling_link", 4003, 4003, follow_symlinks=False)
    return root


def test_tar_extract_and_compare(src, d, tmp_path):
    archive = tmp_path / "tree.tar"
    run("tar", "--xattrs", "--format=posix", "-cf", archive, "-C", src, ".")
    dst = d / "extracted"
    dst.mkdir()
    run("tar", "--xattrs", "--same-owner", "-xpf", archive, "-C", dst)
    run("diff", "-r", "--no-dereference", src, dst)
    assert_same_tree(src, dst)


def test_tar_create_from_mount(src, d, tmp_path):
    """Archive a tree that lives on the mount and unpack it locally: same tree."""
    run("cp", "-a", f"{src}/.", str(d))
    archive = tmp_path / "from_mount.tar"
    run("tar", "--xattrs", "--format=posix", "-cf", archive, "-C", d, ".")
    back = tmp_path / "back"
    back.mkdir()
    run("tar", "--xattrs", "--same-owner", "-xpf", archive, "-C", back)
    assert_same_tree(src, back)


def test_cp_a_tree(src, d):
    dst = d / "copy"
    run("cp", "-a", src, dst)
    run("diff", "-r", "--no-dereference", src, dst)
    assert_same_tree(src, dst)  # modes, owners, mtimes, hard links, xattrs
    # and back again from the mount to the local disk
    back = src.parent / "back"
    run("cp", "-a", dst, back)
    assert_same_tree(src, back)


def test_cp_a_within_mount_and_rm_r(src, d):
    run("cp", "-a", src, d / "one")
    run("cp", "-a", d / "one", d / "two")
    assert_same_tree(d / "one", d / "two")
    run("rm", "-rf", d / "one")
    assert os.listdir(d) == ["two"]
    assert_same_tree(src, d / "two")


def _git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
               GIT_CONFIG_NOSYSTEM="1", HOME=str(repo), GIT_CONFIG_GLOBAL="/dev/null")
    return run("git", "-c", "init.defaultBranch=main", "-c", "safe.directory=*", *args,
               cwd=repo, env=env)


def test_git_init_add_commit(d):
    repo = d / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    make_sample_tree(repo / "tree")
    for i in range(30):
        write_file(repo / f"file{i}.txt", f"line {i}\n".encode() * (i + 1))
    write_file(repo / "blob.bin", pattern("git", 300_000))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "first")
    # second commit: modify, delete, rename
    write_file(repo / "file1.txt", b"changed\n")
    os.unlink(repo / "file2.txt")
    _git(repo, "mv", "file3.txt", "moved.txt")
    _git(repo, "commit", "-q", "-a", "-m", "second")
    _git(repo, "gc", "-q")
    _git(repo, "fsck", "--full", "--strict")
    log = _git(repo, "log", "--format=%s")
    assert log.split() == ["second", "first"]
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "show", "HEAD:file1.txt") == "changed\n"
    # a clone from the mount to the local disk checks out the same files
    clone = d.parent / (d.name + "-clone")
    try:
        _git(d, "clone", "-q", str(repo), str(clone))
        assert (clone / "moved.txt").read_bytes() == (repo / "moved.txt").read_bytes()
        _git(clone, "fsck", "--full")
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def test_shutil_copytree_and_rmtree(src, d):
    shutil.copytree(src, d / "copy", symlinks=True)
    run("diff", "-r", "--no-dereference", src, d / "copy")
    shutil.rmtree(d / "copy")
    assert os.listdir(d) == []
