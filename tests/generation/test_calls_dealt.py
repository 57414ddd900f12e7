"""Round-robin dealing of backend calls: the inverse of wait_for_budget's numbering (call n is generator n mod W's),
which a resumed run uses to give each generator its turn back."""

from replay_rl.generation.generator import calls_dealt


def test_each_generator_gets_the_calls_numbered_with_its_id_modulo_w():
    for w in (1, 2, 3, 5):
        for all_calls in range(12):
            got = [calls_dealt(i, all_calls, w) for i in range(w)]
            assert got == [sum(1 for n in range(all_calls) if n % w == i) for i in range(w)]
            assert sum(got) == all_calls
