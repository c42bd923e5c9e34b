import sys
from fractions import Fraction
import beam_dp.summaries.quantiles.joint as J
J.COUPLING = Fraction(sys.argv[1])
from benchmarks import jointexp
jointexp.main(sys.argv[2:])
