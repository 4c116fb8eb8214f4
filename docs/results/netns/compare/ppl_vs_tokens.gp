set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/netns/compare/ppl_vs_tokens.png"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'tokens (global)'
plot "docs/results/netns/compare/eval_0.dat" using 1:3 with linespoints title "ddp", "docs/results/netns/compare/eval_1.dat" using 1:3 with linespoints title "fsdp", "docs/results/netns/compare/eval_2.dat" using 1:3 with linespoints title "hsdp H=2", "docs/results/netns/compare/eval_3.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid", "docs/results/netns/compare/eval_4.dat" using 1:3 with linespoints title "fl-hsdp S=4 G=2 H=2 K=8 iid"
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/netns/compare/ppl_vs_tokens.svg"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'tokens (global)'
plot "docs/results/netns/compare/eval_0.dat" using 1:3 with linespoints title "ddp", "docs/results/netns/compare/eval_1.dat" using 1:3 with linespoints title "fsdp", "docs/results/netns/compare/eval_2.dat" using 1:3 with linespoints title "hsdp H=2", "docs/results/netns/compare/eval_3.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid", "docs/results/netns/compare/eval_4.dat" using 1:3 with linespoints title "fl-hsdp S=4 G=2 H=2 K=8 iid"
unset output
