set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/stragglers/ppl_vs_time.png"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'training time (s)'
plot "docs/results/stragglers/eval_0.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid", "docs/results/stragglers/eval_1.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid slow group:1=2", "docs/results/stragglers/eval_2.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid round=seconds:13.34 slow group:1=2"
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/stragglers/ppl_vs_time.svg"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'training time (s)'
plot "docs/results/stragglers/eval_0.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid", "docs/results/stragglers/eval_1.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid slow group:1=2", "docs/results/stragglers/eval_2.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid round=seconds:13.34 slow group:1=2"
unset output
