"""Print the seeds' worked examples, computed by the library (the `make run` demo).

Until the release job lands this is what `make run` shows: every number below is computed
by beam_dp's exact mechanisms and bounds, and matches the source notes in shared/seeds.
"""

from __future__ import annotations

from beam_dp.mechanisms import score_loss_bound, select, selection_probabilities


def main() -> None:
    print("beam-dp: the seeds' worked examples, computed by the library\n")
    for margin in (2, 50):
        probs = selection_probabilities(
            [margin, -margin], epsilon=0.1, sensitivity=2, method="exponential"
        )
        print(
            f"Village election (seed 003), margin {margin}, eps 0.1, sensitivity 2: "
            f"P(Melon-pan) = {probs[0]:.5f}, P(Gyudon) = {probs[1]:.5f}"
        )
    bound = score_loss_bound(100, epsilon=0.5, sensitivity=1, confidence=0.99)
    print(
        f"Heavy hitter (seed 002), d = 100, eps 0.5: with probability 0.99 the chosen "
        f"website's score is within {bound:.2f} of the best"
    )
    price_bound = score_loss_bound(199, epsilon=1.0, sensitivity=1.99, confidence=0.95)
    print(
        f"Digital good (seed 002), 199 prices, eps 1: revenue within ${price_bound:.2f} of the "
        "best with probability 0.95"
    )
    winner = select([3, 1], epsilon=0.1, sensitivity=1, method="exponential")
    print(
        "One exact draw of the village election (OS CSPRNG): "
        f"{['Melon-pan', 'Gyudon'][winner]} Party"
    )


if __name__ == "__main__":
    main()
