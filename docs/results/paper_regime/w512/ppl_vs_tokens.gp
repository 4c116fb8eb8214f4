set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/paper_regime/w512/ppl_vs_tokens.png"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'tokens (global)'
plot "docs/results/paper_regime/w512/eval_0.dat" using 1:3 with linespoints title "fsdp W=512", "docs/results/paper_regime/w512/eval_1.dat" using 1:3 with linespoints title "fl-fsdp S=4 G=128 W=512 K=8 iid", "docs/results/paper_regime/w512/eval_2.dat" using 1:3 with linespoints title "hsdp H=4 W=512", "docs/results/paper_regime/w512/eval_3.dat" using 1:3 with linespoints title "fl-hsdp S=32 G=16 H=4 W=512 K=8 iid"
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/paper_regime/w512/ppl_vs_tokens.svg"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'tokens (global)'
plot "docs/results/paper_regime/w512/eval_0.dat" using 1:3 with linespoints title "fsdp W=512", "docs/results/paper_regime/w512/eval_1.dat" using 1:3 with linespoints title "fl-fsdp S=4 G=128 W=512 K=8 iid", "docs/results/paper_regime/w512/eval_2.dat" using 1:3 with linespoints title "hsdp H=4 W=512", "docs/results/paper_regime/w512/eval_3.dat" using 1:3 with linespoints title "fl-hsdp S=32 G=16 H=4 W=512 K=8 iid"
unset output
