"""Sharing a machine among workers: GPU ids are CUDA_VISIBLE_DEVICES's names when set, torch's indices
otherwise; CPU threads are OMP_NUM_THREADS when set, an equal share of the cores otherwise."""

from __future__ import annotations

import os

from damcha_ts.training.devices import threads_per_worker, visible_gpu_ids


def test_without_a_pin_the_ids_are_torch_indices():
    assert visible_gpu_ids(3, {}) == ("0", "1", "2")
    assert visible_gpu_ids(0, {}) == ()


def test_a_pin_is_honoured_in_its_order_and_spaces_are_ignored():
    assert visible_gpu_ids(2, {"CUDA_VISIBLE_DEVICES": " 5, 3"}) == ("5", "3")


def test_only_as_many_as_torch_sees():
    # A pin may name a GPU that does not exist; torch then sees fewer.
    assert visible_gpu_ids(1, {"CUDA_VISIBLE_DEVICES": "2,7"}) == ("2",)


def test_an_empty_pin_hides_every_gpu():
    # As for CUDA itself, whatever count the caller got from elsewhere.
    assert visible_gpu_ids(2, {"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_gpu_ids(2, {"CUDA_VISIBLE_DEVICES": " , "}) == ()


def test_workers_share_the_cores_unless_omp_num_threads_pins_them():
    cores = os.cpu_count() or 1
    assert threads_per_worker(1, {}) == cores
    assert threads_per_worker(cores * 2, {}) == 1  # never zero
    # Three runners on one GPU machine each pin their worker to a third of the cores.
    assert threads_per_worker(1, {"OMP_NUM_THREADS": "5"}) == 5
    assert threads_per_worker(1, {"OMP_NUM_THREADS": "many"}) == cores
