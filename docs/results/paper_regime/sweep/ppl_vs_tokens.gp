set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/paper_regime/sweep/ppl_vs_tokens.png"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'tokens (global)'
plot "docs/results/paper_regime/sweep/eval_0.dat" using 1:3 with linespoints title "fsdp W=8", "docs/results/paper_regime/sweep/eval_1.dat" using 1:3 with linespoints title "fl-fsdp S=4 G=2 W=8 K=8 iid", "docs/results/paper_regime/sweep/eval_2.dat" using 1:3 with linespoints title "fsdp W=32", "docs/results/paper_regime/sweep/eval_3.dat" using 1:3 with linespoints title "fl-fsdp S=4 G=8 W=32 K=8 iid", "docs/results/paper_regime/sweep/eval_4.dat" using 1:3 with linespoints title "fsdp W=512", "docs/results/paper_regime/sweep/eval_5.dat" using 1:3 with linespoints title "fl-fsdp S=4 G=128 W=512 K=8 iid"
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/paper_regime/sweep/ppl_vs_tokens.svg"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'tokens (global)'
plot "docs/results/paper_regime/sweep/eval_0.dat" using 1:3 with linespoints title "fsdp W=8", "docs/results/paper_regime/sweep/eval_1.dat" using 1:3 with linespoints title "fl-fsdp S=4 G=2 W=8 K=8 iid", "docs/results/paper_regime/sweep/eval_2.dat" using 1:3 with linespoints title "fsdp W=32", "docs/results/paper_regime/sweep/eval_3.dat" using 1:3 with linespoints title "fl-fsdp S=4 G=8 W=32 K=8 iid", "docs/results/paper_regime/sweep/eval_4.dat" using 1:3 with linespoints title "fsdp W=512", "docs/results/paper_regime/sweep/eval_5.dat" using 1:3 with linespoints title "fl-fsdp S=4 G=128 W=512 K=8 iid"
unset output
